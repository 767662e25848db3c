"""Solar position with NOAA's formulas (the NOAA Solar Calculator spreadsheet, after Meeus,
*Astronomical Algorithms*), without atmospheric refraction (docs/benchmark.md section 8, Curation, tier 1).

Step by step, for a UTC instant and an observer at (lat, lon) (degrees, east positive):

* Julian day ``JD = unix_seconds / 86400 + 2440587.5``, Julian century ``T = (JD - 2451545) / 36525``;
* geometric mean longitude ``L0 = 280.46646 + T (36000.76983 + 0.0003032 T)`` (mod 360), mean
  anomaly ``M = 357.52911 + T (35999.05029 - 0.0001537 T)``, eccentricity
  ``e = 0.016708634 - T (0.000042037 + 0.0000001267 T)``;
* equation of center ``C = sin M (1.914602 - T (0.004817 + 0.000014 T)) + sin 2M (0.019993 -
  0.000101 T) + sin 3M 0.000289``; true longitude ``L0 + C``; apparent longitude
  ``lambda = L0 + C - 0.00569 - 0.00478 sin(125.04 - 1934.136 T)``;
* mean obliquity ``eps0 = 23 + (26 + (21.448 - T (46.815 + T (0.00059 - 0.001813 T))) / 60) / 60``,
  corrected ``eps = eps0 + 0.00256 cos(125.04 - 1934.136 T)``; declination
  ``delta = asin(sin eps sin lambda)``;
* equation of time (minutes) ``4 deg(y sin 2L0 - 2 e sin M + 4 e y sin M cos 2L0 - y^2/2 sin 4L0 -
  5/4 e^2 sin 2M)`` with ``y = tan^2(eps / 2)``;
* true solar time (minutes) ``(UTC minutes of day + EoT + 4 lon) mod 1440``, hour angle
  ``TST / 4 - 180`` (wrapped to [-180, 180));
* zenith ``acos(sin lat sin delta + cos lat cos delta cos H)``, elevation ``90 - zenith``.

NOAA quotes an accuracy of about 0.01 degree between 1800 and 2100 (refraction aside).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Sequence

import numpy as np


def julian_day(unix_seconds: float) -> float:
    return unix_seconds / 86400.0 + 2440587.5


def _as_unix_seconds(when: datetime | float | int) -> float:
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError("give an aware datetime (UTC); naive datetimes are ambiguous")
        return when.timestamp()
    return float(when)


def solar_position(lat: float, lon: float, when: datetime | float | int) -> dict[str, float]:
    """NOAA solar position (no refraction) at ``when`` (aware datetime or unix seconds, UTC).

    Returns:
        ``elevation_deg``, ``zenith_deg``, ``azimuth_deg`` (clockwise from north),
        ``declination_deg``, ``equation_of_time_min``, ``hour_angle_deg``.

    Example:
        >>> from datetime import datetime, timezone
        >>> p = solar_position(40.0, -105.0, datetime(2010, 6, 21, 6, 6, tzinfo=timezone.utc))
        >>> round(p["elevation_deg"], 3)  # NOAA spreadsheet: -25.246 (uncorrected)
        -25.246
    """
    seconds = _as_unix_seconds(when)
    jd = julian_day(seconds)
    t = (jd - 2451545.0) / 36525.0
    l0 = (280.46646 + t * (36000.76983 + t * 0.0003032)) % 360.0
    m = 357.52911 + t * (35999.05029 - 0.0001537 * t)
    e = 0.016708634 - t * (0.000042037 + 0.0000001267 * t)
    mr = math.radians(m)
    c = (
        math.sin(mr) * (1.914602 - t * (0.004817 + 0.000014 * t))
        + math.sin(2 * mr) * (0.019993 - 0.000101 * t)
        + math.sin(3 * mr) * 0.000289
    )
    true_long = l0 + c
    omega = math.radians(125.04 - 1934.136 * t)
    app_long = true_long - 0.00569 - 0.00478 * math.sin(omega)
    eps0 = 23.0 + (26.0 + (21.448 - t * (46.815 + t * (0.00059 - t * 0.001813))) / 60.0) / 60.0
    eps = eps0 + 0.00256 * math.cos(omega)
    decl = math.degrees(math.asin(math.sin(math.radians(eps)) * math.sin(math.radians(app_long))))
    y = math.tan(math.radians(eps / 2.0)) ** 2
    l0r = math.radians(l0)
    eot = 4.0 * math.degrees(
        y * math.sin(2 * l0r)
        - 2 * e * math.sin(mr)
        + 4 * e * y * math.sin(mr) * math.cos(2 * l0r)
        - 0.5 * y * y * math.sin(4 * l0r)
        - 1.25 * e * e * math.sin(2 * mr)
    )
    minutes_of_day = (seconds % 86400.0) / 60.0
    tst = (minutes_of_day + eot + 4.0 * lon) % 1440.0
    ha = tst / 4.0 - 180.0 if tst / 4.0 >= 0 else tst / 4.0 + 180.0
    latr, declr, har = math.radians(lat), math.radians(decl), math.radians(ha)
    cos_zen = math.sin(latr) * math.sin(declr) + math.cos(latr) * math.cos(declr) * math.cos(har)
    zenith = math.degrees(math.acos(max(-1.0, min(1.0, cos_zen))))
    # Azimuth (NOAA spreadsheet form), degrees clockwise from north.
    zr = math.radians(zenith)
    denom = math.cos(latr) * math.sin(zr)
    if abs(denom) < 1e-12:
        azimuth = 180.0 if lat > decl else 0.0
    else:
        cos_az = max(-1.0, min(1.0, (math.sin(latr) * math.cos(zr) - math.sin(declr)) / denom))
        a = math.degrees(math.acos(cos_az))
        azimuth = (a + 180.0) % 360.0 if ha > 0 else (540.0 - a) % 360.0
    return {
        "elevation_deg": 90.0 - zenith,
        "zenith_deg": zenith,
        "azimuth_deg": azimuth,
        "declination_deg": decl,
        "equation_of_time_min": eot,
        "hour_angle_deg": ha,
    }


def sun_elevation_deg(lat: float, lon: float, captured_at_ms: int | float | None) -> float | None:
    """Solar elevation (degrees, no refraction) at a capture time in UTC milliseconds; None when
    the time or the position is missing."""
    if captured_at_ms is None or lat is None or lon is None:
        return None
    if any(isinstance(v, float) and not math.isfinite(v) for v in (captured_at_ms, lat, lon)):
        return None
    return solar_position(float(lat), float(lon), float(captured_at_ms) / 1000.0)["elevation_deg"]


def sun_elevations(lats: Sequence[float], lons: Sequence[float], captured_at_ms: Sequence) -> np.ndarray:
    """Vector of :func:`sun_elevation_deg` (NaN where it is None)."""
    out = np.full(len(lats), np.nan)
    for i, (la, lo, ts) in enumerate(zip(lats, lons, captured_at_ms)):
        value = sun_elevation_deg(la, lo, None if ts is None or (isinstance(ts, float) and math.isnan(ts)) else ts)
        if value is not None:
            out[i] = value
    return out


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """UTC milliseconds of a calendar instant (handy for tests and examples)."""
    return int(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp() * 1000)
