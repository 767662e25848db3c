"""The 25 cities of the release (docs/benchmark.md section 8, Curation) and user cities from a CSV or JSON file."""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..benchmark import City, display_name
from .errors import CurationError

_KEY = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class CitySpec:
    """What carving and curation need to know about a city."""

    key: str
    country: str
    lat: float
    lon: float
    driving_side: str
    name: str = ""

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            raise CurationError(
                f"city key {self.key!r} must be lower-case letters, digits and '_' (e.g. 'new_york')"
            )
        if not (isinstance(self.country, str) and len(self.country) == 2 and self.country.isalpha()):
            raise CurationError(f"city {self.key!r}: country must be an ISO-3166 alpha-2 code, got {self.country!r}")
        if self.driving_side not in ("L", "R"):
            raise CurationError(f"city {self.key!r}: driving side must be 'L' or 'R', got {self.driving_side!r}")
        if not (-90.0 <= self.lat <= 90.0 and -180.0 <= self.lon <= 180.0):
            raise CurationError(f"city {self.key!r}: center ({self.lat}, {self.lon}) is not a valid lat/lon")

    @property
    def display_name(self) -> str:
        return self.name or display_name(self.key)

    @property
    def center(self) -> tuple[float, float]:
        return (self.lat, self.lon)

    def to_city(self) -> City:
        return City(self.key, self.display_name, self.country, (self.lat, self.lon), self.driving_side)


def _spec(key: str, country: str, lat: float, lon: float, side: str) -> CitySpec:
    return CitySpec(key, country, lat, lon, side)


#: docs/benchmark.md section 8, Curation: key, ISO-2, center, driving side, in the order of the release.
BUILTIN_CITIES: dict[str, CitySpec] = {
    c.key: c
    for c in (
        _spec("london", "GB", 51.5074, -0.1278, "L"),
        _spec("paris", "FR", 48.8566, 2.3522, "R"),
        _spec("berlin", "DE", 52.5200, 13.4050, "R"),
        _spec("rome", "IT", 41.9028, 12.4964, "R"),
        _spec("amsterdam", "NL", 52.3676, 4.9041, "R"),
        _spec("new_york", "US", 40.7128, -74.0060, "R"),
        _spec("san_francisco", "US", 37.7749, -122.4194, "R"),
        _spec("toronto", "CA", 43.6532, -79.3832, "R"),
        _spec("mexico_city", "MX", 19.4326, -99.1332, "R"),
        _spec("buenos_aires", "AR", -34.6037, -58.3816, "R"),
        _spec("sao_paulo", "BR", -23.5505, -46.6333, "R"),
        _spec("bogota", "CO", 4.7110, -74.0721, "R"),
        _spec("tokyo", "JP", 35.6762, 139.6503, "L"),
        _spec("singapore", "SG", 1.3521, 103.8198, "L"),
        _spec("mumbai", "IN", 19.0760, 72.8777, "L"),
        _spec("bangkok", "TH", 13.7563, 100.5018, "L"),
        _spec("seoul", "KR", 37.5665, 126.9780, "R"),
        _spec("shanghai", "CN", 31.2304, 121.4737, "R"),
        _spec("dubai", "AE", 25.2048, 55.2708, "R"),
        _spec("cape_town", "ZA", -33.9249, 18.4241, "L"),
        _spec("nairobi", "KE", -1.2921, 36.8219, "L"),
        _spec("cairo", "EG", 30.0444, 31.2357, "R"),
        _spec("istanbul", "TR", 41.0082, 28.9784, "R"),
        _spec("sydney", "AU", -33.8688, 151.2093, "L"),
        _spec("melbourne", "AU", -37.8136, 144.9631, "L"),
    )
}

_ALIASES = {
    "key": ("key", "city"),
    "country": ("country", "iso2", "country_code"),
    "lat": ("lat", "center_lat", "latitude"),
    "lon": ("lon", "center_lon", "lng", "longitude"),
    "driving_side": ("driving_side", "side"),
    "name": ("name", "display_name"),
}


def _field(rec: Mapping[str, Any], name: str, where: str, required: bool = True) -> Any:
    for alias in _ALIASES[name]:
        if alias in rec and rec[alias] not in (None, ""):
            return rec[alias]
    if required:
        raise CurationError(f"{where}: missing field {name!r} (accepted names: {', '.join(_ALIASES[name])})")
    return None


def city_from_record(rec: Mapping[str, Any], where: str = "city") -> CitySpec:
    """A CitySpec from a mapping with key, country, lat, lon, driving_side (and optional name)."""
    rec = {str(k).strip().lower(): (v.strip() if isinstance(v, str) else v) for k, v in rec.items()}
    if "center" in rec and isinstance(rec["center"], (list, tuple)) and len(rec["center"]) == 2:
        rec.setdefault("lat", rec["center"][0])
        rec.setdefault("lon", rec["center"][1])
    key = str(_field(rec, "key", where))
    try:
        lat, lon = float(_field(rec, "lat", where)), float(_field(rec, "lon", where))
    except (TypeError, ValueError) as err:
        raise CurationError(f"{where}: city {key!r} has a non-numeric center: {err}") from None
    return CitySpec(
        key=key,
        country=str(_field(rec, "country", where)).upper(),
        lat=lat,
        lon=lon,
        driving_side=str(_field(rec, "driving_side", where)).upper(),
        name=str(_field(rec, "name", where, required=False) or ""),
    )


def load_city_file(path: str | os.PathLike) -> dict[str, CitySpec]:
    """Cities from a CSV (header: key,country,lat,lon,driving_side[,name]) or a JSON file (a list
    of such objects, or an object mapping key -> object)."""
    path = Path(path)
    if not path.is_file():
        raise CurationError(f"city file not found: {str(path)!r}")
    where = str(path)
    records: list[Mapping[str, Any]]
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise CurationError(f"city file {where!r} is not valid JSON: {err}") from None
        if isinstance(data, Mapping):
            records = [dict(v, key=k) for k, v in data.items()]
        elif isinstance(data, list):
            records = data
        else:
            raise CurationError(f"city file {where!r}: expected a list of cities or an object key -> city")
    elif path.suffix.lower() in (".csv", ".tsv"):
        with open(path, newline="", encoding="utf-8") as fh:
            dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
            records = list(csv.DictReader(fh, dialect=dialect))
    else:
        raise CurationError(f"city file {where!r}: expected a .csv or .json file")
    out: dict[str, CitySpec] = {}
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise CurationError(f"{where}: entry {i} is not an object")
        spec = city_from_record(rec, f"{where}, entry {i}")
        if spec.key in out:
            raise CurationError(f"{where}: city {spec.key!r} appears twice")
        out[spec.key] = spec
    if not out:
        raise CurationError(f"city file {where!r} lists no cities")
    return out


def resolve_cities(keys: Iterable[str] | None, city_file: str | os.PathLike | None = None) -> list[CitySpec]:
    """The cities to curate: ``keys`` looked up in the city file, then the built-in cities;
    without ``keys``, every city of the file."""
    extra = load_city_file(city_file) if city_file else {}
    known = {**BUILTIN_CITIES, **extra}
    if not keys:
        if not extra:
            raise CurationError("no cities: pass --cities KEY ... or --city-file FILE")
        return list(extra.values())
    out = []
    for key in keys:
        if key not in known:
            raise CurationError(
                f"unknown city {key!r}; built-in cities: {', '.join(BUILTIN_CITIES)} (add others with --city-file)"
            )
        if known[key] not in out:
            out.append(known[key])
    return out
