"""Loopback fakes of the Overpass API and the Mapillary Graph API v4, for curation tests.

Real threaded ``http.server`` instances on 127.0.0.1 (no network, no dependencies), answering
with realistic payloads:

* :class:`FakeOverpass` - ``POST /api/interpreter`` (form field ``data``): the ways of an
  :class:`~geofidelity_bench.curation.osm.OsmData` in Overpass ``out geom`` JSON
  (``{"type": "way", "id", "tags", "bounds", "geometry": [{"lat", "lon"}, ...]}``) that lie
  within the query's ``around:`` radius, its place nodes, and its neighborhood areas (closed
  ways, or multipolygon relations with their rings as member ways) for the area statements.
* :class:`FakeMapillary` - ``GET /images?bbox=...&fields=...&limit=...`` with the
  ``{"data": [...], "paging": {"next": ...}}`` envelope (the next link carries
  ``access_token=...`` as the real API does), and ``GET /thumbs/{id}.jpg`` serving JPEG bytes.
  Requests must carry ``Authorization: OAuth {token}`` (or ``access_token``), else HTTP 401.

Both record ``(method, path, status)`` per request (never headers or query strings) and inject
faults: ``fail_next(path_regex, status, count)``, ``delay_next(path_regex, seconds, count)``
(a timeout for a client with a shorter timeout; the regex is searched in the path and query, so
``"/images[?].*after="`` hits only next pages), and for images ``truncate_next(image_id, count,
mode)`` (``"short"``: the body ends before its Content-Length; ``"corrupt"``: a cut JPEG with a
matching Content-Length). The Mapillary fake can also send its ``paging.next`` links to another
origin (``next_base``), answer other thumbnail URLs (``thumb_urls``), redirect anywhere
(``GET /redirect?to=URL``), and counts the requests that carried its token (``token_seen``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Sequence
from urllib.parse import parse_qs, urlencode, urlsplit


@dataclass
class _Fault:
    pattern: re.Pattern
    kind: str  # "status", "delay"
    value: float
    remaining: int


class _FakeServer:
    name = "fake"

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []
        self.token_in_url = 0
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()
        self._in_flight = 0
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self):
                outer._tracked(self, "GET")

            def do_POST(self):
                outer._tracked(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.name,
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- faults and bookkeeping -----------------------------------------------------------
    def fail_next(self, path_regex: str, status: int = 500, count: int = 1) -> None:
        with self._lock:
            self._faults.append(_Fault(re.compile(path_regex), "status", status, count))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def delay_next(self, path_regex: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._faults.append(_Fault(re.compile(path_regex), "delay", seconds, count))

    def count(self, path_regex: str = "", status: int | None = None, method: str | None = None) -> int:
        rx = re.compile(path_regex)
        with self._lock:
            return sum(1 for m, p, s in self.requests
                       if rx.search(p) and (status is None or s == status) and (method is None or m == method))

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Waits until no request is being handled: a delayed response that the client already gave
        up on is recorded only when the server sends it, which can be after the client has moved on."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return
            time.sleep(0.02)
        raise AssertionError(f"{self.name}: requests still in flight after {timeout_s} s")

    def _tracked(self, h: BaseHTTPRequestHandler, method: str) -> None:
        with self._lock:
            self._in_flight += 1
        try:
            self._dispatch(h, method)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _take_fault(self, path: str) -> _Fault | None:
        with self._lock:
            for f in self._faults:
                if f.remaining > 0 and f.pattern.search(path):
                    f.remaining -= 1
                    return f
        return None

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))

    def _send(self, h: BaseHTTPRequestHandler, method: str, path: str, status: int, body: bytes,
              ctype: str = "application/json", *, declared_length: int | None = None,
              headers: dict[str, str] | None = None) -> None:
        self._record(method, path, status)
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body) if declared_length is None else declared_length))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            if declared_length is not None:
                h.send_header("Connection", "close")
                h.close_connection = True
            h.end_headers()
            h.wfile.write(body)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        if "access_token" in query:
            with self._lock:
                self.token_in_url += 1
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        fault = self._take_fault(h.path)  # path and query
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.value)
        if fault is not None and fault.kind == "status":
            status = int(fault.value)
            payload = json.dumps({"error": {"message": f"injected {status}", "code": status}}).encode()
            headers = {"Retry-After": "0"} if status == 429 else None
            self._send(h, method, parts.path, status, payload, headers=headers)
            return
        self.handle(h, method, parts.path, query, body)

    def handle(self, h, method, path, query, body) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# -- Overpass ---------------------------------------------------------------------------------


_AROUND = re.compile(r"(way|node|relation)(\[[^;]*?\])\(around:([0-9.]+),(-?[0-9.]+),(-?[0-9.]+)\)")


def _geom(ring) -> list[dict[str, float]]:
    return [{"lat": p[0], "lon": p[1]} for p in ring]


def _area_tags(area) -> dict[str, str]:
    if area.kind.startswith("admin_level="):
        tags = {"boundary": "administrative", "admin_level": area.kind.split("=", 1)[1]}
    else:
        tags = {"place": area.kind}
    return {**tags, "name": area.name}


def _area_element(area) -> dict[str, Any]:
    """An area as Overpass ``out tags geom`` gives it: a closed way, or a multipolygon relation
    whose member ways are its rings (outer / inner roles)."""
    tags = _area_tags(area)
    if area.osm_type == "way":
        return {"type": "way", "id": area.osm_id, "tags": tags, "geometry": _geom(area.polygons[0][0])}
    members = [{"type": "way", "ref": 10**12 + k, "role": "outer" if i == 0 else "inner", "geometry": _geom(ring)}
               for k, (i, ring) in enumerate((i, r) for rings in area.polygons for i, r in enumerate(rings))]
    return {"type": "relation", "id": area.osm_id, "tags": {**tags, "type": "multipolygon"}, "members": members}


class FakeOverpass(_FakeServer):
    """An Overpass interpreter over fixed OSM records (ways, place nodes, neighborhood areas)."""

    name = "fake-overpass"

    def __init__(self, data) -> None:
        super().__init__()
        self.data = data
        self.queries: list[str] = []

    def handle(self, h, method, path, query, body) -> None:
        if method != "POST" or not path.endswith("/interpreter"):
            self._send(h, method, path, 404, b'{"error": "not found"}')
            return
        form = parse_qs(body.decode("utf-8"))
        q = (form.get("data") or [""])[0]
        self.queries.append(q)
        from geofidelity_bench.curation.osm import polyline_distance_m
        from geofidelity_bench.geo import haversine_m

        elements: list[dict[str, Any]] = []
        seen_areas: set = set()
        for kind, filters, radius, lat, lon in _AROUND.findall(q):
            r, la, lo = float(radius), float(lat), float(lon)
            if kind == "way" and '"highway"' in filters:
                for w in self.data.ways:
                    if polyline_distance_m(w.geometry, la, lo) <= r:
                        lats = [p[0] for p in w.geometry]
                        lons = [p[1] for p in w.geometry]
                        elements.append({
                            "type": "way", "id": w.way_id,
                            "bounds": {"minlat": min(lats), "minlon": min(lons), "maxlat": max(lats), "maxlon": max(lons)},
                            "geometry": [{"lat": p[0], "lon": p[1]} for p in w.geometry],
                            "tags": {"highway": w.highway, "name": w.name},
                        })
            elif kind == "node":
                for p in self.data.places:
                    if haversine_m(p.lat, p.lon, la, lo) <= r:
                        elements.append({"type": "node", "id": p.node_id, "lat": p.lat, "lon": p.lon,
                                         "tags": {"place": p.place, "name": p.name}})
            else:  # neighborhood areas: place=... or boundary=administrative statements
                admin = '"boundary"' in filters
                for a in getattr(self.data, "areas", ()):
                    if (a.osm_type != kind or a.kind.startswith("admin_level=") != admin
                            or (a.osm_type, a.osm_id) in seen_areas):
                        continue
                    rings = [ring for rings in a.polygons for ring in rings]
                    if min(polyline_distance_m(ring, la, lo) for ring in rings) <= r:
                        seen_areas.add((a.osm_type, a.osm_id))
                        elements.append(_area_element(a))
        payload = {"version": 0.6, "generator": "fake-overpass", "osm3s": {"copyright": "(c) OpenStreetMap contributors, ODbL 1.0"},
                   "elements": elements}
        self._send(h, method, path, 200, json.dumps(payload).encode())


# -- Mapillary --------------------------------------------------------------------------------


class FakeMapillary(_FakeServer):
    """Graph API v4 ``/images`` search and ``/thumbs/{id}.jpg`` over fixed image records.

    Args:
        images: Graph API image records (``id``, ``geometry``/``computed_geometry`` as GeoJSON
            points, ``captured_at`` in ms, ``is_pano``, ``camera_type``, ...); ``thumb_1024_url``
            is filled in to point back to this server.
        jpegs: image id -> JPEG bytes served at its thumbnail URL.
        token: the access token requests must carry.
        page_size: most records per page (the smaller of this and ``limit``).
    """

    name = "fake-mapillary"

    def __init__(self, images: Sequence[dict[str, Any]], jpegs: dict[str, bytes], token: str, page_size: int = 100):
        super().__init__()
        self.images = sorted((dict(i) for i in images), key=lambda r: str(r["id"]))
        self.jpegs = jpegs
        self.token = token
        self.page_size = page_size
        self._truncations: dict[str, list[str]] = {}
        #: the origin its ``paging.next`` links point to (default: this server), to play a page that
        #: sends the client elsewhere
        self.next_base: str | None = None
        #: image id -> the ``thumb_1024_url`` to answer instead of this server's (``file:``, a redirect, ...)
        self.thumb_urls: dict[str, str] = {}
        #: requests that carried this server's token (in the Authorization header or the query)
        self.token_seen = 0

    def truncate_next(self, image_id: str, count: int = 1, mode: str = "short") -> None:
        with self._lock:
            self._truncations.setdefault(str(image_id), []).extend([mode] * count)

    def _authorized(self, h, query) -> bool:
        auth = h.headers.get("Authorization", "")
        return auth == f"OAuth {self.token}" or (query.get("access_token") or [None])[0] == self.token

    def handle(self, h, method, path, query, body) -> None:
        if self.token in h.headers.get("Authorization", "") or self.token in (query.get("access_token") or [""])[0]:
            with self._lock:
                self.token_seen += 1
        if method == "GET" and path == "/redirect":  # 302 to ?to=URL (any scheme)
            self._send(h, method, path, 302, b"", "text/plain", headers={"Location": (query.get("to") or [""])[0]})
            return
        if method == "GET" and path.endswith("/images"):
            if not self._authorized(h, query):
                self._send(h, method, path, 401, json.dumps(
                    {"error": {"message": "Invalid OAuth access token.", "type": "OAuthException", "code": 190}}).encode())
                return
            self._search(h, method, path, query)
        elif method == "GET" and path.startswith("/thumbs/"):
            self._thumb(h, method, path)
        else:
            self._send(h, method, path, 404, b'{"error": {"message": "unknown path"}}')

    def _search(self, h, method, path, query) -> None:
        try:
            min_lon, min_lat, max_lon, max_lat = (float(v) for v in query["bbox"][0].split(","))
        except (KeyError, ValueError):
            self._send(h, method, path, 400, b'{"error": {"message": "bbox required"}}')
            return
        limit = min(int((query.get("limit") or ["100"])[0]), self.page_size)
        after = int((query.get("after") or ["0"])[0])
        fields = (query.get("fields") or ["id"])[0].split(",")
        hits = []
        for rec in self.images:
            geom = rec.get("computed_geometry") or rec.get("geometry")
            lon, lat = geom["coordinates"]
            if min_lon <= lon <= max_lon and min_lat <= lat <= max_lat:
                hits.append({k: self._field(rec, k) for k in fields if k in rec or k == "thumb_1024_url"})
        page = hits[after: after + limit]
        payload: dict[str, Any] = {"data": page}
        if after + limit < len(hits):
            nxt = {"bbox": query["bbox"][0], "fields": ",".join(fields), "limit": str(limit), "after": str(after + limit),
                   "access_token": self.token}
            payload["paging"] = {"cursors": {"after": str(after + limit)},
                                 "next": f"{self.next_base or self.url}{path}?{urlencode(nxt)}"}
        self._send(h, method, path, 200, json.dumps(payload).encode())

    def _field(self, rec, key):
        if key == "thumb_1024_url":
            return self.thumb_urls.get(str(rec["id"])) or f"{self.url}/thumbs/{rec['id']}.jpg?stp=dst-jpg&_nc_sig=fake"
        return rec[key]

    def _thumb(self, h, method, path) -> None:
        image_id = path.rsplit("/", 1)[-1].removesuffix(".jpg")
        data = self.jpegs.get(image_id)
        if data is None:
            self._send(h, method, path, 404, b"not found", "text/plain")
            return
        with self._lock:
            modes = self._truncations.get(image_id)
            mode = modes.pop(0) if modes else None
        if mode == "short":
            self._send(h, method, path, 200, data[: len(data) // 2], "image/jpeg", declared_length=len(data))
        elif mode == "corrupt":
            self._send(h, method, path, 200, data[: len(data) // 2], "image/jpeg")
        else:
            self._send(h, method, path, 200, data, "image/jpeg")


def point(lat: float, lon: float) -> dict[str, Any]:
    return {"type": "Point", "coordinates": [lon, lat]}


def iter_requests(servers: Iterable[_FakeServer]):
    for s in servers:
        yield from s.requests


# -- realistic image records along blocks ------------------------------------------------------

DAY_MS = 1_623_787_200_000  # 2021-06-15 20:00 UTC: early afternoon on the US west coast
MIDNIGHT_UTC_MS = 1_623_715_200_000  # 2021-06-15 00:00 UTC


def local_noon_ms(lon: float) -> int:
    """About local solar noon of 15 June 2021 at longitude ``lon`` (UTC milliseconds)."""
    return int(MIDNIGHT_UTC_MS + (12.0 - lon / 15.0) * 3_600_000)


def demo_jpegs() -> list[bytes]:
    """Real street-level JPEGs: the embedded demo's world pool (Mapillary, CC BY-SA 4.0) and its
    Lund references (OpenSfM, BSD-2-Clause)."""
    from geofidelity_bench.benchmark import load_benchmark

    bench = load_benchmark("demo", validate_images=False)
    return [w.image_bytes for w in bench.world] + [r.image_bytes for r in bench.references if r.block_id.startswith("lund")]


def offset_point(polyline, fraction: float, offset_m: float) -> tuple[float, float]:
    """The point at ``fraction`` of the polyline's arc length, moved ``offset_m`` to its left
    (perpendicular, in a local azimuthal equidistant projection)."""
    import numpy as np
    import shapely

    from geofidelity_bench.curation.filters import local_projection

    c = polyline[0]
    fwd = local_projection(c[0], c[1])
    xs, ys = fwd.transform([p[1] for p in polyline], [p[0] for p in polyline])
    line = shapely.linestrings(np.column_stack([xs, ys]))
    d = fraction * line.length
    p = line.interpolate(d)
    q = line.interpolate(min(d + 1.0, line.length)) if d + 1.0 <= line.length else line.interpolate(d - 1.0)
    dx, dy = (q.x - p.x, q.y - p.y) if d + 1.0 <= line.length else (p.x - q.x, p.y - q.y)
    norm = (dx * dx + dy * dy) ** 0.5
    x, y = p.x - dy / norm * offset_m, p.y + dx / norm * offset_m
    lon, lat = fwd.transform(x, y, direction="INVERSE")
    return float(lat), float(lon)


def images_along_blocks(blocks, per_block: int = 10, *, first_id: int = 1_000_000_000_000_000):
    """Graph API records along each block: ``per_block`` good images within 12 m, and one of each
    failure: 45 m off the street, a panorama, a night capture, a fisheye camera, no capture time.
    One more good image per block has only ``geometry`` (GPS), no ``computed_geometry``.

    Returns (records, kinds) where kinds maps image id -> what it is ("good", "far", ...).
    """
    records, kinds = [], {}
    next_id = first_id
    for bi, block in enumerate(sorted(blocks, key=lambda b: b.block_id)):
        plan = [("good", (k + 0.5) / per_block, (k % 5) * 3.0 - 6.0) for k in range(per_block)]
        plan += [("gps_only", 0.37, 4.0), ("far", 0.5, 45.0), ("pano", 0.3, 2.0), ("night", 0.6, 2.0),
                 ("fisheye", 0.7, 2.0), ("no_time", 0.8, 2.0)]
        for j, (kind, frac, off) in enumerate(plan):
            lat, lon = offset_point(block.polyline, frac, off)
            image_id = str(next_id)
            next_id += 1
            rec = {
                "id": image_id,
                "geometry": point(lat + 0.00002, lon - 0.00002),  # raw GPS a few metres off
                "computed_geometry": point(lat, lon),
                "captured_at": local_noon_ms(lon) + (12 * 3_600_000 if kind == "night" else 60_000 * (bi * 10 + j)),
                "is_pano": kind == "pano",
                "camera_type": {"pano": "spherical", "fisheye": "fisheye"}.get(kind, "perspective" if j % 2 else "flat"),
                "compass_angle": float((37 * j) % 360),
                "quality_score": round(0.3 + 0.05 * (j % 10), 2),
            }
            if kind == "gps_only":
                del rec["computed_geometry"]
                rec["geometry"] = point(lat, lon)
            if kind == "no_time":
                del rec["captured_at"]
            if j % 4 == 3:
                del rec["quality_score"]
            records.append(rec)
            kinds[image_id] = kind
    return records, kinds
