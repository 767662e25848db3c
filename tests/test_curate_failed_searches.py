"""``curate``: a Mapillary search page that is not a Graph API page (issue 43, lost work).

``{"data": "oops", "paging": [...]}`` used to read as "no images": the block was recorded as searched,
the run exited 0 and a re-run never searched it again, so its photos never arrived. A malformed page is
now retried like a server error and then fails its block: recorded as failed (not done), named in the
output and in ``curation_summary.json`` (``failed_searches``), the run exits 1 (incomplete), and the next
run searches it again and gives the clean run's benchmark."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.curation import RetryPolicy
from geofidelity_bench.curation.mapillary import MapillaryClient, MapillarySearchError, search_boxes

from fake_geo_servers import FakeMapillary
from test_curation_pipeline import OSM, TOKEN, world  # noqa: F401 - the module's world fixture

#: Pages a proxy, a cache or a confused service may answer with HTTP 200 (the first is issue 43's).
MALFORMED_PAGES = {
    "data a string, paging a list": {"data": "oops", "paging": ["next"]},
    "data missing": {"paging": {"cursors": {}}},
    "data null": {"data": None},
    "data an object": {"data": {"id": "1"}},
    "a list, not an object": [{"id": "1"}],
    "paging.next not a link": {"data": [], "paging": {"next": 5}},
    "paging a string": {"data": [], "paging": "next"},
}


class MalformedMapillary(FakeMapillary):
    """The fake Graph API, answering ``malformed_body`` with HTTP 200 to searches whose path and query
    match one of ``malformed`` (a regex; every time, as a service that keeps answering so would)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.malformed: list[re.Pattern] = []
        self.malformed_body: object = MALFORMED_PAGES["data a string, paging a list"]

    def handle(self, h, method, path, query, body) -> None:
        if method == "GET" and path.endswith("/images") and any(p.search(h.path) for p in self.malformed):
            self._send(h, method, path, 200, json.dumps(self.malformed_body).encode())
            return
        super().handle(h, method, path, query, body)


@pytest.fixture()
def fake(world):  # noqa: F811 - the imported fixture
    with MalformedMapillary(world["records"], world["jpegs"], TOKEN, page_size=20) as server:
        yield server


@pytest.mark.parametrize("body", list(MALFORMED_PAGES.values()), ids=list(MALFORMED_PAGES))
def test_a_malformed_search_page_is_retried_then_fails_the_search(world, fake, body):  # noqa: F811
    fake.malformed = [re.compile(r"/images")]
    fake.malformed_body = body
    client = MapillaryClient(TOKEN, base_url=fake.url, retry=RetryPolicy(max_server_retries=2, sleep=lambda s: None))
    with pytest.raises(MapillarySearchError) as info:
        client.search_box(search_boxes(world["blocks"][0].polyline)[0])
    assert info.value.transient  # recorded as failed by the pipeline, searched again by the next run
    assert "invalid answer" in str(info.value) and "not" in str(info.value) and TOKEN not in str(info.value)
    assert fake.count("/images") == 3  # the first try and its 2 retries


def _argv(out: Path, fake: FakeMapillary) -> list[str]:
    return ["curate", "--city-file", str(_city_file(out.parent)),
            "--out", str(out), "--osm-file", f"west_oakland={OSM / 'west_oakland.osm.bz2'}",
            f"helsinki={OSM / 'helsinki.osm.pbf'}", "--mapillary-url", fake.url, "--min-images", "5",
            "--max-images", "8", "--max-workers", "4", "--timeout", "5", "--no-progress", "--retry-delay-scale", "0",
            "--max-server-retries", "1", "--skip-tier3", "--skip-tier4"]


def _city_file(folder: Path) -> Path:
    path = folder / "cities.csv"
    path.write_text("key,country,lat,lon,driving_side\nwest_oakland,US,37.8076,-122.3004,R\n"
                    "helsinki,FI,60.1699,24.9384,R\n", encoding="utf-8")
    return path


def test_malformed_searches_are_named_failed_and_searched_again_by_a_rerun(world, fake, tmp_path, monkeypatch,  # noqa: F811
                                                                             capsys):
    from geofidelity_bench.cli import main

    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    assert main(_argv(tmp_path / "clean", fake)) == 0
    capsys.readouterr()
    clean = load_benchmark(tmp_path / "clean")

    # three searches answer a malformed page, each the first box of a block the clean benchmark keeps
    kept = sorted({b.block_id for b in clean.blocks})
    by_id = {b.block_id: b for b in world["blocks"]}
    chosen = [kept[0], kept[len(kept) // 2], kept[-1]]
    for block_id in chosen:
        bbox = urlencode({"bbox": ",".join(f"{v:.7f}" for v in search_boxes(by_id[block_id].polyline)[0])})
        fake.malformed.append(re.compile(rf"/images[?]{re.escape(bbox)}"))
    out = tmp_path / "bench"
    assert main(_argv(out, fake)) == 1  # incomplete
    printed = capsys.readouterr()
    summary = json.loads((out / "curation_summary.json").read_text(encoding="utf-8"))
    failed = {r["block_id"]: r for r in summary["failed_searches"]}
    assert set(chosen) <= set(failed) and summary["complete"] is False
    for block_id in chosen:
        assert "'data' is a string" in failed[block_id]["error"]
        assert f"search {block_id}: " in printed.out and "re-run to search it again" in summary["skipped"][
            f"search {block_id}"]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "**This run was incomplete**" in card and all(b in card.split("incomplete**")[1] for b in chosen)
    assert "incomplete run" in printed.err and all(b in printed.err for b in chosen)
    assert load_benchmark(out).fingerprint != clean.fingerprint
    for city in ("west_oakland", "helsinki"):  # the failed city's checkpoint is recorded as failed, not done
        meta = json.loads((out / "_work" / "02_metadata" / "cities" / f"{city}.json").read_text(encoding="utf-8"))
        assert meta["complete"] is (city not in {by_id[b].city for b in chosen})
        assert (meta["key"] is None) is (not meta["complete"])

    fake.malformed.clear()  # the service answers properly again
    n_searches = fake.count("/images")
    assert main(_argv(out, fake)) == 0
    assert fake.count("/images") > n_searches  # searched again
    summary = json.loads((out / "curation_summary.json").read_text(encoding="utf-8"))
    assert summary["failed_searches"] == [] and summary["complete"] is True
    assert "incomplete" not in (out / "README.md").read_text(encoding="utf-8")
    assert load_benchmark(out).fingerprint == clean.fingerprint
    assert TOKEN not in capsys.readouterr().out
