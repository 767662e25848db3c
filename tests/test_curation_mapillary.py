"""The Mapillary Graph API v4 client against a loopback fake: search boxes, pagination, retries
(429 with growing sleeps, 5xx, timeouts), token handling and redaction, resumable validated
downloads."""

from __future__ import annotations


import pytest

from geofidelity_bench.benchmark import Block
from geofidelity_bench.curation import CurationError
from geofidelity_bench.curation.http import RetryPolicy, redact, strip_query_params
from geofidelity_bench.curation.mapillary import (
    SEARCH_FIELDS,
    MapillarySearchError,
    MapillaryClient,
    image_filename,
    normalize_image,
    sample_along,
    search_boxes,
)
from geofidelity_bench.geo import arc_midpoint, bbox, haversine_m, polyline_length_m
from geofidelity_bench.images import load_image

from fake_geo_servers import DAY_MS, FakeMapillary, demo_jpegs, images_along_blocks, point

TOKEN = "MLY|4242424242|c0ffeec0ffeec0ffee-secret"


def _block(block_id: str, polyline) -> Block:
    return Block(block_id, "oakland", "US", "R", "residential", 1, "A Street", "downtown", "residential",
                 polyline_length_m(polyline), tuple(polyline), arc_midpoint(polyline), bbox(polyline))


@pytest.fixture(scope="module")
def jpegs():
    return demo_jpegs()


@pytest.fixture(scope="module")
def blocks():
    return [
        _block("oak_a_1", [(37.8060, -122.3030), (37.8060, -122.2990), (37.8075, -122.2985)]),
        _block("oak_b_2", [(37.8100, -122.3000), (37.8130, -122.3000)]),
    ]


@pytest.fixture()
def fake(blocks, jpegs):
    records, kinds = images_along_blocks(blocks, per_block=6)
    images = {r["id"]: jpegs[i % len(jpegs)] for i, r in enumerate(records)}
    with FakeMapillary(records, images, TOKEN, page_size=5) as srv:
        srv.kinds = kinds
        yield srv


def _client(fake, sleeps=None, **kw) -> MapillaryClient:
    retry = RetryPolicy(sleep=(sleeps.append if sleeps is not None else (lambda s: None)))
    kw.setdefault("max_workers", 4)
    kw.setdefault("timeout_s", 5)
    return MapillaryClient(TOKEN, base_url=fake.url, retry=retry, **kw)


# -- search geometry --------------------------------------------------------------------------


def test_sample_along_every_200_m_with_both_ends():
    line = [(0.0, 0.0), (0.0, 0.004), (0.004, 0.004)]  # ~445 m east, then ~445 m north
    pts = sample_along(line, 200.0)
    assert pts[0] == line[0] and pts[-1] == line[-1]
    assert len(pts) == 6  # 0, 200, 400, 600, 800 m and the end (~890 m)
    walked = [0.0]
    for a, b in zip(line, line[1:]):
        walked.append(walked[-1] + haversine_m(*a, *b))
    # consecutive samples on the same straight segment are 200 m apart
    assert haversine_m(*pts[0], *pts[1]) == pytest.approx(200.0, abs=0.01)
    assert haversine_m(*pts[3], *pts[4]) == pytest.approx(200.0, abs=0.01)


def test_search_boxes_are_plus_minus_0_0045_degrees():
    line = [(37.8, -122.30), (37.8, -122.30 + 1000 / 88_000)]  # ~1 km east
    boxes = search_boxes(line)
    assert len(boxes) == 6
    for (min_lon, min_lat, max_lon, max_lat), (lat, lon) in zip(boxes, sample_along(line, 200.0)):
        assert max_lat - min_lat == pytest.approx(0.009, abs=1e-7) and max_lon - min_lon == pytest.approx(0.009, abs=1e-7)
        assert (min_lat + max_lat) / 2 == pytest.approx(lat, abs=1e-7) and (min_lon + max_lon) / 2 == pytest.approx(lon, abs=1e-7)


def test_normalize_image_prefers_computed_geometry():
    rec = {"id": 123, "geometry": point(1.0, 2.0), "computed_geometry": point(1.5, 2.5), "captured_at": DAY_MS,
           "is_pano": False, "camera_type": "perspective", "compass_angle": 10, "quality_score": 0.7,
           "thumb_1024_url": "https://cdn.example/x.jpg?access_token=abc&sig=1"}
    row = normalize_image(rec)
    assert (row["lat"], row["lon"], row["geometry_source"]) == (1.5, 2.5, "computed_geometry")
    assert row["image_id"] == "123" and row["captured_at"] == DAY_MS and row["thumb_1024_url"] == "https://cdn.example/x.jpg?sig=1"
    del rec["computed_geometry"]
    assert normalize_image(rec)["geometry_source"] == "geometry"
    assert normalize_image({"id": 1}) is None
    assert set(SEARCH_FIELDS) >= {"id", "geometry", "captured_at", "is_pano", "camera_type", "compass_angle",
                                  "thumb_1024_url", "quality_score"}


def test_image_filename_is_safe():
    assert image_filename("1234567890") == "1234567890.jpg"
    assert image_filename("../../etc/passwd").startswith("id-") and "/" not in image_filename("../x")


# -- search -------------------------------------------------------------------------------------


def test_search_follows_pagination_and_never_puts_the_token_in_a_url(fake, blocks):
    client = _client(fake)
    rows = client.search_blocks(blocks)
    assert "***" in repr(client) and TOKEN not in repr(client)
    # every image of the fake within a box of its block is found (pages of 5)
    expected = set()
    for block in blocks:
        boxes = search_boxes(block.polyline)
        for rec in fake.images:
            lon, lat = (rec.get("computed_geometry") or rec["geometry"])["coordinates"]
            if any(b[0] <= lon <= b[2] and b[1] <= lat <= b[3] for b in boxes):
                expected.add((block.block_id, rec["id"]))
    assert {(r["block_id"], r["image_id"]) for r in rows} == expected
    assert rows == sorted(rows, key=lambda r: (r["block_id"], r["image_id"]))
    assert fake.count("/images") > len(search_boxes(blocks[0].polyline)) + len(search_boxes(blocks[1].polyline))
    assert fake.token_in_url == 0  # the access_token of paging.next was stripped, the header carried it
    assert all(r["thumb_1024_url"].startswith(fake.url + "/thumbs/") for r in rows)
    for r in rows:
        assert set(r) == {"block_id", "city", "image_id", "lat", "lon", "geometry_source", "captured_at", "is_pano",
                          "camera_type", "compass_angle", "quality_score", "thumb_1024_url"}


def test_search_retries_429_with_growing_sleeps_and_5xx_briefly(fake, blocks):
    sleeps: list[float] = []
    client = _client(fake, sleeps, max_workers=1)
    baseline = _client(fake).search_blocks(blocks[:1])
    fake.fail_next("/images", 429, count=3)
    rows = client.search_blocks(blocks[:1])
    assert rows == baseline
    assert sleeps == [2.0, 4.0, 8.0]  # growing
    sleeps.clear()
    fake.fail_next("/images", 500, count=1)
    fake.fail_next("/images", 502, count=1)
    assert client.search_blocks(blocks[:1]) == baseline
    assert sleeps == [1.0, 2.0]  # brief
    assert client.http.stats["retries_429"] == 3 and client.http.stats["retries_server"] == 2


def test_search_retries_a_timeout(fake, blocks):
    client = _client(fake, timeout_s=1.0)
    baseline = _client(fake).search_blocks(blocks[1:])
    fake.delay_next("/images", 2.5, count=1)
    assert client.search_blocks(blocks[1:]) == baseline
    assert client.http.stats["retries_server"] >= 1


def test_search_failure_and_bad_token_are_redacted(fake, blocks):
    wrong = MapillaryClient("MLY|wrong-token-value", base_url=fake.url, retry=RetryPolicy(sleep=lambda s: None))
    with pytest.raises(CurationError, match="HTTP 401") as info:
        wrong.search_box(search_boxes(blocks[0].polyline)[0])
    assert "wrong-token-value" not in str(info.value)
    client = _client(fake)
    fake.fail_next("/images", 503, count=10)
    with pytest.raises(CurationError, match="failed after 4 attempts") as info:
        client.search_box(search_boxes(blocks[0].polyline)[0])
    assert TOKEN not in str(info.value)


NEXT_PAGE = r"/images\?.*after="


def test_a_failing_next_page_is_retried_then_fails_only_its_block(fake, blocks):
    """The paging code set ``params = None`` after page 1 and read it in the error path (AttributeError)."""
    baseline = _client(fake).search_blocks(blocks)
    sleeps: list[float] = []
    client = _client(fake, sleeps, max_workers=1)
    fake.fail_next(NEXT_PAGE, 500, count=2)  # retried per the policy, then it works
    assert client.search_blocks(blocks) == baseline and sleeps == [1.0, 2.0]

    box = next(b for b in search_boxes(blocks[0].polyline) + search_boxes(blocks[1].polyline)
               if len(_client(fake).search_box(b)) > 5)  # a box with a second page (pages of 5)
    fake.fail_next(NEXT_PAGE, 500, count=4)
    with pytest.raises(CurationError, match=r"failed for box .* \(page 2\): .*failed after 4 attempts") as info:
        client.search_box(box)
    assert TOKEN not in str(info.value)

    fake.fail_next(NEXT_PAGE, 500, count=4)  # the first next page of the run fails for good
    failures: dict[str, str] = {}
    rows = client.search_blocks(blocks, failures=failures)
    assert len(failures) == 1 and "HTTP 500" in next(iter(failures.values()))
    failed = next(iter(failures))
    assert any(r["block_id"] == failed for r in baseline)  # that block had images: none are kept half-searched
    assert rows == [r for r in baseline if r["block_id"] != failed]
    fake.fail_next(NEXT_PAGE, 401, count=1)  # not transient: a bad token is not recorded per block
    with pytest.raises(CurationError, match="HTTP 401"):
        client.search_blocks(blocks, failures={})


def test_missing_token_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("MAPILLARY_TOKEN", raising=False)
    with pytest.raises(CurationError, match="MAPILLARY_TOKEN"):
        MapillaryClient()
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    assert MapillaryClient().search_params()["limit"] == 100


def test_redact():
    msg = (f"GET https://graph.mapillary.com/images?access_token={TOKEN}&bbox=1 failed; "
           f"headers {{'Authorization': 'OAuth {TOKEN}'}} token={TOKEN}")
    out = redact(msg, [TOKEN])
    assert TOKEN not in out and "4242424242" not in out
    assert redact("Authorization: OAuth MLY|other|x", []) == "Authorization: OAuth ***"
    assert redact("https://x/?access_token=abc&b=2", []) == "https://x/?access_token=***&b=2"
    assert strip_query_params("https://x/p?access_token=abc&after=5") == "https://x/p?after=5"


# -- downloads ----------------------------------------------------------------------------------


def _items(fake, n=None):
    ids = [r["id"] for r in fake.images][:n]
    return [(i, f"{fake.url}/thumbs/{i}.jpg?sig=1") for i in ids]


def test_downloads_are_validated_retried_and_resumable(fake, tmp_path):
    client = _client(fake)
    items = _items(fake, 8)
    fake.truncate_next(items[0][0], 1, "short")  # the body ends before its Content-Length
    fake.truncate_next(items[1][0], 2, "corrupt")  # a cut JPEG, twice
    fake.fail_next("/thumbs/", 503, count=1)
    rows = client.download(items, tmp_path)
    assert [r["status"] for r in rows] == ["downloaded"] * 8
    for image_id, _ in items:
        data = (tmp_path / f"{image_id}.jpg").read_bytes()
        assert data == fake.jpegs[image_id]
        load_image(data)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left
    n = fake.count("/thumbs/")
    # resume: existing files are checked and kept; a damaged one is fetched again
    (tmp_path / f"{items[2][0]}.jpg").write_bytes(b"\xff\xd8broken")
    rows = client.download(items, tmp_path)
    status = {r["image_id"]: r["status"] for r in rows}
    assert status.pop(items[2][0]) == "downloaded" and set(status.values()) == {"cached"}
    assert fake.count("/thumbs/") == n + 1


def test_a_download_that_stays_truncated_is_reported(fake, tmp_path):
    client = _client(fake, download_retries=2)
    items = _items(fake, 2)
    fake.truncate_next(items[0][0], 5, "corrupt")
    rows = {r["image_id"]: r for r in client.download(items + [("999", None)], tmp_path)}
    bad = rows[items[0][0]]
    assert bad["status"] == "failed" and bad["attempts"] == 3 and "cannot decode" in bad["error"]
    assert not (tmp_path / f"{items[0][0]}.jpg").exists()
    assert rows[items[1][0]]["status"] == "downloaded"
    assert rows["999"]["status"] == "failed" and rows["999"]["error"] == "no thumb_1024_url"


def test_a_redirect_to_another_host_does_not_carry_the_token(fake, blocks):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    target = fake.url

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", target.replace("127.0.0.1", "localhost") + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        client = MapillaryClient(TOKEN, base_url=f"http://127.0.0.1:{srv.server_address[1]}",
                                 retry=RetryPolicy(sleep=lambda s: None))
        with pytest.raises(CurationError, match="HTTP 401") as info:  # the fake wants the token: it was not sent
            client.search_box(search_boxes(blocks[0].polyline)[0])
        assert TOKEN not in str(info.value)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_next_page_link_to_another_origin_is_not_followed_and_never_gets_the_token(fake, blocks, jpegs):
    """A search page whose ``paging.next`` points to another server: the other server sees no request (so
    never the token), and the blocks whose search needed that page are recorded as not fully searched."""
    with FakeMapillary(fake.images, fake.jpegs, TOKEN, page_size=5) as other:
        fake.next_base = other.url  # same host, another port: another origin
        client = _client(fake)
        failures: dict[str, str] = {}
        empty = _block("far_away", [(38.5, -121.5), (38.5, -121.497)])  # no image: one page, searched fully
        rows = client.search_blocks([*blocks, empty], failures=failures)
        assert other.count("") == 0 and other.token_seen == 0
        assert set(failures) == {b.block_id for b in blocks}  # every block here has more than one page
        assert all("another origin" in why and other.url in why and "not followed" in why for why in failures.values())
        assert rows == []
        with pytest.raises(MapillarySearchError) as info:
            client.search_box(search_boxes(blocks[0].polyline)[0])
        assert info.value.offsite_link and info.value.transient and TOKEN not in str(info.value)
        fake.next_base = None  # the API's own origin: followed as before
        assert len(client.search_box(search_boxes(blocks[0].polyline)[0])) > 5
        assert other.count("") == 0 and fake.token_seen > 0


def test_thumbnails_are_downloaded_only_over_https_or_the_api_scheme(fake, tmp_path):
    """A ``file:`` thumbnail URL (or a redirect to ``file:``/``ftp:``) is refused and recorded as failed: no
    local file becomes a reference photo."""
    secret = tmp_path / "private.jpg"
    secret.write_bytes(fake.jpegs[fake.images[0]["id"]])
    ids = [r["id"] for r in fake.images][:4]
    items = [(ids[0], secret.as_uri()),
             (ids[1], f"{fake.url}/redirect?to={secret.as_uri()}"),
             (ids[2], f"{fake.url}/redirect?to=ftp://127.0.0.1:9/x.jpg"),
             (ids[3], f"{fake.url}/thumbs/{ids[3]}.jpg")]
    dest = tmp_path / "images"
    rows = {r["image_id"]: r for r in _client(fake).download(items, dest)}
    for image_id in ids[:3]:
        assert rows[image_id]["status"] == "failed" and "not allowed" in rows[image_id]["error"], rows[image_id]
        assert not (dest / f"{image_id}.jpg").exists()
    assert "file:" in rows[ids[0]]["error"] and "redirect" in rows[ids[1]]["error"]
    assert rows[ids[3]]["status"] == "downloaded"
    assert MapillaryClient(TOKEN).thumbnail_schemes == ("https",)
    assert _client(fake).thumbnail_schemes == ("https", "http")
