"""Mapillary Graph API v4: image metadata around a block, and resumable thumbnail downloads.

Search (docs/benchmark.md section 8, Curation): points every ``step_m`` (200 m) of arc length along the block polyline,
both ends included; around each a box of +-``half_deg`` (0.0045 degree) in latitude and longitude;
``GET {base_url}/images?bbox=minLon,minLat,maxLon,maxLat&fields=...&limit=100``, following
``paging.next`` links on the API's own origin (scheme, host and port of ``base_url``): a link to
another origin is not followed at all (the token would go there, and without it the Graph API
answers nothing), and the block is recorded as not fully searched, like a page that keeps failing.
Requests of a run go through one ThreadPoolExecutor (``max_workers``).

The access token comes from ``MAPILLARY_TOKEN`` (or the ``token`` argument). It is sent as an
``Authorization: OAuth ...`` header, never put in a URL we build; ``access_token`` parameters that
the server echoes into ``paging.next`` or thumbnail links are stripped before use or storage; and
every message the client produces is passed through :func:`~.http.redact`. Thumbnails are
downloaded without the token (they are signed CDN links), and only over https (or the scheme of
``base_url``, for a loopback test server), redirects included: a ``file:`` or ``ftp:`` thumbnail URL
is refused and the image recorded as failed, so no local file can become a reference photo.

Retries: HTTP 429 with growing sleeps (2, 4, 8, ... s, up to 6 times), 5xx, timeouts, dropped
connections and malformed pages (not JSON, or ``data`` not a list, ``paging`` not an object, ``paging.next``
not a string) briefly (1, 2, 3 s); tests scale the sleeps down with ``RetryPolicy(scale=...)``. Every
page of a search (the first and each ``paging.next``) is retried this way; a page that still fails
fails its block: :meth:`MapillaryClient.search_blocks` either raises or, given ``failures``,
records the block there and goes on with the others (the curation pipeline does that and searches
the block again on the next run).

Downloads are resumable: a file that exists and decodes is kept; new files are written
atomically (temporary file + rename) after they decode with :func:`~geofidelity_bench.images.load_image`;
a truncated or undecodable answer is retried, and reported in the download table if it stays bad.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..benchmark import Block
from ..geo import haversine_m
from ..images import ImageDecodeError, load_image
from .errors import CurationError
from ..atomic import atomic_write_bytes
from .http import HTTPClient, HTTPFailure, RetryPolicy, origin, redact, strip_query_params

MAPILLARY_URL = "https://graph.mapillary.com"
TOKEN_ENV = "MAPILLARY_TOKEN"
#: Fields asked for (docs/benchmark.md section 8, Curation, plus ``computed_geometry``, preferred when present).
SEARCH_FIELDS = (
    "id", "geometry", "computed_geometry", "captured_at", "is_pano", "camera_type", "compass_angle",
    "thumb_1024_url", "quality_score",
)
PAGE_LIMIT = 100
BOX_STEP_M = 200.0
BOX_HALF_DEG = 0.0045

#: Columns of the candidates table (one row per block-image pair).
CANDIDATE_COLUMNS = (
    "block_id", "city", "image_id", "lat", "lon", "geometry_source", "captured_at", "is_pano", "camera_type",
    "compass_angle", "quality_score", "thumb_1024_url",
)


class MapillarySearchError(CurationError):
    """A search request failed for good (after its retries); ``status`` is None for network errors."""

    def __init__(self, message: str, status: int | None = None, *, offsite_link: bool = False):
        super().__init__(message)
        self.status = status
        #: a ``paging.next`` link to another origin was not followed (recorded like a failed page)
        self.offsite_link = offsite_link

    @property
    def transient(self) -> bool:
        """True for what a later run may not meet again (no connection, timeouts, HTTP 429/5xx)."""
        return self.status is None or self.status == 429 or self.status >= 500


def _origin_text(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _page_problem(body: bytes) -> str | None:
    """Why a search page is not one the Graph API sends (None when it is): a JSON object whose ``data`` is a
    list and whose ``paging``, when present, is an object with a string ``next`` (or none).

    A page that is not (``{"data": "oops", "paging": [...]}``: a proxy, a cache or the service answering
    something else) is retried like a server error and then fails its block, which the next run searches
    again: read as "no images", it would record the block as searched and lose its photos for good."""
    try:
        payload = json.loads(body)
    except ValueError:
        return "answer is not JSON"
    if not isinstance(payload, Mapping):
        return f"the page is {_json_kind(payload)}, not a JSON object"
    if not isinstance(payload.get("data"), list):
        return f"the page's 'data' is {_json_kind(payload.get('data'))}, not a list of images"
    paging = payload.get("paging")
    if paging is not None and not isinstance(paging, Mapping):
        return f"the page's 'paging' is {_json_kind(paging)}, not an object"
    nxt = (paging or {}).get("next")
    if nxt is not None and not isinstance(nxt, str):
        return f"the page's 'paging.next' is {_json_kind(nxt)}, not a link"
    return None


def _json_kind(value: Any) -> str:
    if value is None:
        return "missing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def sample_along(polyline: Sequence[Sequence[float]], step_m: float) -> list[tuple[float, float]]:
    """Points every ``step_m`` metres of haversine arc length along the polyline (linear
    interpolation in lat/lon within a segment), the first and the last point included."""
    pts = [(float(p[0]), float(p[1])) for p in polyline]
    if not pts:
        return []
    if step_m <= 0:
        raise ValueError("step_m must be > 0")
    out = [pts[0]]
    next_at = step_m
    walked = 0.0
    for a, b in zip(pts, pts[1:]):
        seg = haversine_m(a[0], a[1], b[0], b[1])
        while seg > 0 and walked + seg >= next_at:
            t = (next_at - walked) / seg
            out.append((a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])))
            next_at += step_m
        walked += seg
    if len(pts) > 1 and (abs(out[-1][0] - pts[-1][0]) > 1e-12 or abs(out[-1][1] - pts[-1][1]) > 1e-12):
        out.append(pts[-1])
    return out


def search_boxes(polyline: Sequence[Sequence[float]], step_m: float = BOX_STEP_M,
                 half_deg: float = BOX_HALF_DEG) -> list[tuple[float, float, float, float]]:
    """Search boxes ``(min_lon, min_lat, max_lon, max_lat)`` of +-``half_deg`` around the points
    every ``step_m`` along the polyline (duplicates removed, order kept)."""
    boxes: list[tuple[float, float, float, float]] = []
    seen = set()
    for lat, lon in sample_along(polyline, step_m):
        box = (round(lon - half_deg, 7), round(lat - half_deg, 7), round(lon + half_deg, 7), round(lat + half_deg, 7))
        if box not in seen:
            seen.add(box)
            boxes.append(box)
    return boxes


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _point(geom: Any) -> tuple[float, float] | None:
    if isinstance(geom, Mapping):
        coords = geom.get("coordinates")
        if isinstance(coords, (list, tuple)) and len(coords) >= 2:
            lon, lat = _opt_float(coords[0]), _opt_float(coords[1])
            if lon is not None and lat is not None:
                return lat, lon
    return None


def normalize_image(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """One Graph API image record as a flat row (None when it has no id or no position).

    Position: ``computed_geometry`` (Mapillary's SfM-corrected position) when present, else
    ``geometry`` (the camera's GPS); ``geometry_source`` says which.
    """
    image_id = rec.get("id")
    if image_id is None or str(image_id).strip() == "":
        return None
    pos, source = _point(rec.get("computed_geometry")), "computed_geometry"
    if pos is None:
        pos, source = _point(rec.get("geometry")), "geometry"
    if pos is None:
        return None
    captured = rec.get("captured_at")
    try:
        captured = int(captured) if captured is not None else None
    except (TypeError, ValueError):
        captured = None
    pano = rec.get("is_pano")
    thumb = rec.get("thumb_1024_url")
    return {
        "image_id": str(image_id),
        "lat": pos[0],
        "lon": pos[1],
        "geometry_source": source,
        "captured_at": captured,
        "is_pano": bool(pano) if pano is not None else None,
        "camera_type": str(rec["camera_type"]) if rec.get("camera_type") is not None else None,
        "compass_angle": _opt_float(rec.get("compass_angle")),
        "quality_score": _opt_float(rec.get("quality_score")),
        "thumb_1024_url": strip_query_params(str(thumb)) if thumb else None,
    }


_SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


def image_filename(image_id: str) -> str:
    """A safe file name for an image id (the id itself when it is safe, else a hash of it)."""
    if _SAFE_FILE.match(image_id):
        return f"{image_id}.jpg"
    return "id-" + hashlib.sha256(image_id.encode("utf-8")).hexdigest()[:32] + ".jpg"


class MapillaryClient:
    """Graph API v4 image search and thumbnail downloads.

    Args:
        token: access token; default ``os.environ["MAPILLARY_TOKEN"]``.
        base_url: the Graph API root (``https://graph.mapillary.com``; a fake server in tests).
        max_workers: parallel requests.
        timeout_s: socket timeout of one request.
        retry: the :class:`RetryPolicy` (429: growing sleeps; 5xx and timeouts: brief).
        max_pages: most ``paging.next`` links followed per box (a guard against loops).
        download_retries: extra attempts for a thumbnail that fails or does not decode.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        base_url: str = MAPILLARY_URL,
        max_workers: int = 8,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        max_pages: int = 50,
        download_retries: int = 3,
        page_limit: int = PAGE_LIMIT,
        box_step_m: float = BOX_STEP_M,
        box_half_deg: float = BOX_HALF_DEG,
    ) -> None:
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if not token or not token.strip():
            raise CurationError(
                f"the Mapillary Graph API needs an access token: set the environment variable {TOKEN_ENV} "
                "(create one at https://www.mapillary.com/dashboard/developers); it is never written or logged"
            )
        self._token = token.strip()
        self.base_url = base_url.rstrip("/")
        self.max_workers = max(1, int(max_workers))
        self.max_pages = int(max_pages)
        self.download_retries = int(download_retries)
        self.page_limit = int(page_limit)
        self.box_step_m = float(box_step_m)
        self.box_half_deg = float(box_half_deg)
        self.http = HTTPClient(timeout_s=timeout_s, retry=retry or RetryPolicy(),
                               user_agent="geofidelity-bench-curation", secrets=[self._token])

    def __repr__(self) -> str:
        return f"MapillaryClient(base_url={self.redact(self.base_url)!r}, max_workers={self.max_workers}, token=***)"

    def redact(self, text: Any) -> str:
        return redact(text, [self._token])

    @property
    def secrets(self) -> list[str]:
        return [self._token]

    @property
    def thumbnail_schemes(self) -> tuple[str, ...]:
        """The schemes a thumbnail URL (and its redirects) may use: https, and the API base's own scheme
        (http for a loopback test server); never ``file:`` or ``ftp:``."""
        return tuple(dict.fromkeys(("https", urllib.parse.urlsplit(self.base_url).scheme.lower())))

    def search_params(self) -> dict[str, Any]:
        """What determines search results (for checkpoint keys; no token)."""
        return {"base_url": self.base_url, "fields": list(SEARCH_FIELDS), "limit": self.page_limit,
                "box_step_m": self.box_step_m, "box_half_deg": self.box_half_deg, "max_pages": self.max_pages}

    # -- search ----------------------------------------------------------------------------
    def search_box(self, box: Sequence[float]) -> list[dict[str, Any]]:
        """Normalized image rows in one bbox, following ``paging.next``."""
        bbox = ",".join(f"{v:.7f}" for v in box)
        params: dict[str, Any] | None = {"bbox": bbox, "fields": ",".join(SEARCH_FIELDS), "limit": self.page_limit}
        url: str | None = f"{self.base_url}/images"
        rows: list[dict[str, Any]] = []
        pages = 0
        headers = {"Authorization": f"OAuth {self._token}"}
        while url:
            try:
                payload = self.http.request("GET", url, params=params, headers=headers, validate=_page_problem)
            except HTTPFailure as err:
                page = f" (page {pages + 1})" if pages else ""
                raise MapillarySearchError(f"Mapillary search failed for box {bbox}{page}: {self.redact(err)}",
                                           err.status) from None
            payload = json.loads(payload)
            for rec in payload["data"]:
                if isinstance(rec, Mapping):
                    row = normalize_image(rec)
                    if row is not None:
                        rows.append(row)
            pages += 1
            nxt = (payload.get("paging") or {}).get("next")
            if not nxt or pages >= self.max_pages:
                break
            url, params = strip_query_params(str(nxt)), None
            if origin(url) != origin(self.base_url):  # the token goes to the API's own origin only
                raise MapillarySearchError(
                    f"Mapillary search for box {bbox}: the paging.next link of page {pages} leads to another origin "
                    f"({self.redact(_origin_text(url))}, not {self.redact(_origin_text(self.base_url))}); not followed "
                    "(the token is only sent to the API, and the search of this block is incomplete without it)",
                    None, offsite_link=True)
        return rows

    def search_blocks(self, blocks: Sequence[Block], *, progress: bool = False, desc: str = "Mapillary search",
                      failures: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Candidate rows (one per block and image, :data:`CANDIDATE_COLUMNS`), sorted by
        (block_id, image_id). Boxes of all blocks are searched in parallel.

        A box whose search still fails after the retries raises :class:`MapillarySearchError`;
        given a ``failures`` dict, a transient failure (network, 429, 5xx) is recorded there
        instead (block_id -> the redacted reason) and that block has no rows (it was only
        partly searched); the other blocks go on. When every block fails, the service is down:
        the first error is raised all the same.
        """
        from tqdm.auto import tqdm

        tasks = [(b, box) for b in blocks for box in search_boxes(b.polyline, self.box_step_m, self.box_half_deg)]
        found: dict[tuple[str, str], dict[str, Any]] = {}
        first_error: MapillarySearchError | None = None
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool, \
                tqdm(total=len(tasks), desc=desc, unit="box", disable=not progress) as bar:
            futures = {pool.submit(self.search_box, box): block for block, box in tasks}
            try:
                for fut in as_completed(futures):
                    block = futures[fut]
                    try:
                        box_rows = fut.result()
                    except MapillarySearchError as err:
                        if failures is None or not err.transient:
                            raise
                        failures.setdefault(block.block_id, str(err))
                        first_error = first_error or err
                        box_rows = []
                    for row in box_rows:
                        key = (block.block_id, row["image_id"])
                        if key not in found:
                            found[key] = {"block_id": block.block_id, "city": block.city, **row}
                    bar.update(1)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        failed = failures or {}
        if first_error is not None and all(b.block_id in failed for b in blocks):
            raise first_error
        return [found[k] for k in sorted(found) if k[0] not in failed]

    # -- downloads -------------------------------------------------------------------------
    def download(self, items: Sequence[tuple[str, str | None]], dest: str | os.PathLike, *,
                 progress: bool = False) -> list[dict[str, Any]]:
        """Downloads ``(image_id, url)`` thumbnails into ``dest`` (resumable, validated).

        Returns one row per image: image_id, file (name inside ``dest``), status
        (``downloaded``, ``cached`` or ``failed``), attempts, n_bytes, sha256, error (redacted).
        """
        from tqdm.auto import tqdm

        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        rows: dict[str, dict[str, Any]] = {}
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool, \
                tqdm(total=len(items), desc="downloading images", unit="img", disable=not progress) as bar:
            futures = {pool.submit(self._download_one, image_id, url, dest): image_id for image_id, url in items}
            for fut in as_completed(futures):
                row = fut.result()
                rows[row["image_id"]] = row
                bar.update(1)
        return [rows[k] for k in sorted(rows)]

    def _download_one(self, image_id: str, url: str | None, dest: Path) -> dict[str, Any]:
        name = image_filename(image_id)
        path = dest / name
        row = {"image_id": image_id, "file": name, "status": "failed", "attempts": 0, "n_bytes": 0, "sha256": None,
               "error": None}
        if path.is_file():
            data = path.read_bytes()
            try:
                load_image(data, name=f"image {image_id}")
                return {**row, "status": "cached", "n_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            except ImageDecodeError:
                path.unlink()  # a damaged earlier download is fetched again
        if not url:
            return {**row, "error": "no thumb_1024_url"}

        def validate(body: bytes) -> str | None:
            try:
                load_image(body, name=f"image {image_id}")
            except ImageDecodeError as err:
                return str(err)
            return None

        try:
            data = self.http.request("GET", url, validate=validate, max_server_retries=self.download_retries,
                                     allowed_schemes=self.thumbnail_schemes)
        except HTTPFailure as err:
            return {**row, "attempts": err.attempts, "error": self.redact(err)}
        atomic_write_bytes(path, data)
        return {**row, "status": "downloaded", "attempts": None, "n_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}


ClientFactory = Callable[[], MapillaryClient]
