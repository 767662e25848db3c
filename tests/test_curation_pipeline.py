"""``geofidelity-bench curate`` end to end, offline: the real OSM extracts (West Oakland read with
the standard library, Helsinki served by a fake Overpass), a fake Mapillary serving real
street photos with injected 429s, 5xx, timeouts and truncated images, small thresholds via
flags. The result must load as a benchmark and be scorable; the token must appear nowhere; an
interrupted run must resume from its checkpoints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.curation import CurationConfig, CurationError, Curator, RetryPolicy
from geofidelity_bench.curation.carving import carve_blocks
from geofidelity_bench.curation.cities import CitySpec
from geofidelity_bench.curation.filters import FilterThresholds
from geofidelity_bench.curation.mapillary import MapillaryClient
from geofidelity_bench.curation.osm import read_osm_file

from fake_geo_servers import FakeMapillary, FakeOverpass, demo_jpegs, images_along_blocks
from test_curation_filters import tiny_siglip_curation_dir  # noqa: F401 - the tiny SigLIP fixture

OSM = Path(__file__).parent / "data" / "osm"
TOKEN = "MLY|777000777|pipeline-secret-token-abc123"
OAKLAND = CitySpec("west_oakland", "US", 37.8076, -122.3004, "R")
HELSINKI = CitySpec("helsinki", "FI", 60.1699, 24.9384, "R")


@pytest.fixture(scope="module")
def world():
    """OSM records, carved blocks (default carving rules) and Mapillary-like records along them."""
    oakland = read_osm_file(OSM / "west_oakland.osm.bz2")
    helsinki = read_osm_file(OSM / "helsinki.osm.pbf")
    blocks = carve_blocks(oakland, OAKLAND) + carve_blocks(helsinki, HELSINKI)
    records, kinds = images_along_blocks(blocks, per_block=9)
    jpegs = demo_jpegs()
    images = {r["id"]: jpegs[i % len(jpegs)] for i, r in enumerate(records)}
    return {"oakland": oakland, "helsinki": helsinki, "blocks": blocks, "records": records, "kinds": kinds,
            "jpegs": images}


@pytest.fixture()
def servers(world):
    with FakeOverpass(world["helsinki"]) as overpass, \
            FakeMapillary(world["records"], world["jpegs"], TOKEN, page_size=20) as mapillary:
        yield overpass, mapillary


def _city_file(tmp_path: Path) -> Path:
    path = tmp_path / "cities.csv"
    path.write_text("key,country,lat,lon,driving_side\nwest_oakland,US,37.8076,-122.3004,R\n"
                    "helsinki,FI,60.1699,24.9384,R\n", encoding="utf-8")
    return path


def _argv(tmp_path, out, overpass, mapillary, *extra):
    return ["curate", "--city-file", str(_city_file(tmp_path)), "--out", str(out),
            "--osm-file", f"west_oakland={OSM / 'west_oakland.osm.bz2'}",
            "--overpass-endpoint", f"{overpass.url}/api/interpreter",
            "--mapillary-url", mapillary.url, "--min-images", "5", "--max-images", "8", "--max-workers", "4",
            "--timeout", "2", "--no-progress", "--retry-delay-scale", "0", *extra]  # retries without waiting


def _files_containing(root: Path, needle: str) -> list[Path]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and needle.encode() in p.read_bytes():
            hits.append(p)
    return hits


def test_curate_end_to_end_with_faults(world, servers, tmp_path, monkeypatch, capsys, caplog):
    from geofidelity_bench.cli import main

    overpass, mapillary = servers
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    overpass.fail_next("interpreter", 429, count=1)
    overpass.fail_next("interpreter", 504, count=1)
    mapillary.fail_next("/images", 429, count=3)
    mapillary.fail_next("/images", 500, count=1)
    mapillary.delay_next("/images", 3.0, count=1)  # longer than --timeout 2
    mapillary.fail_next("/thumbs/", 503, count=1)
    mapillary.delay_next("/thumbs/", 3.0, count=1)
    good = [i for i, k in world["kinds"].items() if k == "good"]
    mapillary.truncate_next(good[0], 1, "short")
    mapillary.truncate_next(good[1], 2, "corrupt")

    out = tmp_path / "bench"
    assert main(_argv(tmp_path, out, overpass, mapillary, "--skip-tier3", "--skip-tier4")) == 0
    captured = capsys.readouterr()

    # the retries happened (their schedule: test_retries_follow_the_real_schedule)
    assert mapillary.count("/images", 429) == 3 and mapillary.count("/thumbs/", 503) == 1
    assert overpass.count("interpreter", 429) == 1 and overpass.count("interpreter", 200) == 1

    bench = load_benchmark(out)
    carved = {b.block_id for b in world["blocks"]}
    assert set(bench.cities) == {"west_oakland", "helsinki"}
    assert {b.block_id for b in bench.blocks} <= carved and len(bench.blocks) >= 4
    for block in bench.blocks:
        refs = bench.references_of(block.block_id)
        assert 5 <= len(refs) <= 8
        assert block.neg_same_driving_side is not None and block.neg_random_city is not None
    kinds = world["kinds"]
    for ref in bench.references:
        assert kinds[ref.image_id] in ("good", "gps_only")  # far, pano, night, fisheye, no-time all filtered
        assert ref.license == "CC-BY-SA-4.0" and ref.attribution == "Mapillary contributors"
        assert ref.source_url == f"https://www.mapillary.com/app/?pKey={ref.image_id}"
        assert ref.sun_elevation_deg >= 20 and ref.captured_at is not None
        assert ref.image_bytes == world["jpegs"][ref.image_id]
        assert ref.reference_id == f"{ref.block_id}__{ref.image_id}"

    # nothing lost: every image that passed spatial + tier 1 was downloaded despite the faults
    work = out / "_work"
    dl = pd.read_parquet(work / "04_download" / "download.parquet")
    assert set(dl["status"]) <= {"downloaded"} and len(dl) > 0
    filt = pd.read_parquet(work / "03_spatial_tier1" / "spatial_tier1.parquet")
    passing = set(filt.loc[filt["spatial_pass"] & filt["tier1_pass"], "image_id"])
    assert passing == set(dl["image_id"])
    assert (work / "03_spatial_tier1" / "spatial_tier1.csv").is_file()
    far = [i for i, k in kinds.items() if k == "far"]
    assert not filt.loc[filt["image_id"].isin(far), "spatial_pass"].any()
    assert (filt.loc[filt["image_id"].isin(far), "distance_m"] > 40).all()

    # tier tables: skipped tiers have none, tier 5 measured every downloaded image
    assert not (work / "05_tier3" / "tier3.parquet").exists() and not (work / "06_tier4" / "tier4.parquet").exists()
    t5 = pd.read_parquet(work / "07_tier5" / "tier5.parquet")
    assert set(t5["image_id"]) == set(dl["image_id"])
    sel = pd.read_parquet(work / "08_select" / "select.parquet")
    # the copy-audit gate: the fixture serves its 100 photos in a cycle, so some image ids share bytes;
    # duplicates within a block and between a block and its negatives are removed and recorded
    removed = pd.read_csv(out / "copy_audit_removed.csv", dtype=str)
    assert len(removed) > 0
    assert sel["kept"].sum() - len(removed) == len(bench.references)
    gate = json.loads((out / "curation_summary.json").read_text())["copy_audit_gate"]
    assert sorted(r["reference_id"] for r in gate["removed"]) == sorted(removed["reference_id"])
    kept_ids = {f"{r.block_id}__{r.image_id}" for r in sel[sel["kept"]].itertuples()}
    assert set(removed["reference_id"]) <= kept_ids
    assert not set(removed["reference_id"]) & {r.reference_id for r in bench.references}
    for r in removed.itertuples():  # each removed photo has the bytes of the photo it duplicates
        image = world["jpegs"][r.reference_id.split("__", 1)[1]]
        assert image == world["jpegs"][r.duplicate_id.split("__", 1)[1]]
    # independently: no two photos with the same bytes are left in one block or in a block and its negative
    by_block: dict[str, set] = {}
    for ref in bench.references:
        by_block.setdefault(ref.block_id, set())
        assert ref.sha256 not in by_block[ref.block_id]
        by_block[ref.block_id].add(ref.sha256)
    for block in bench.blocks:
        for neg in {v for v in bench.negatives(block.block_id).values() if v}:
            assert not by_block[block.block_id] & by_block[neg], (block.block_id, neg)

    summary = pd.read_csv(out / "curation_summary.csv")
    assert list(summary["city"]) == ["west_oakland", "helsinki"]
    row = summary.set_index("city").loc["west_oakland"]
    # default carving rules: 7th Street, 8th Street (merged from 3 ways each) and Campbell Street
    assert row["blocks_carved"] == 3 and row["download_failed"] == 0
    assert set(summary["carving_rules"]) == {"default"}
    for block in bench.blocks:  # way ids and the neighborhood's source travel into the benchmark folder
        assert block.way_ids and block.way_ids[0] == block.way_id
        assert block.neighborhood_source == ("none" if block.city == "west_oakland" else "node")
        assert (block.neighborhood is None) == (block.city == "west_oakland")  # never "downtown"
    assert row["pass_tier3"] == "skipped" and row["pass_tier4"] == "skipped"
    assert int(row["pass_spatial"]) >= int(row["pass_tier1"]) >= int(row["pass_tier5"])
    assert int(summary["references_kept"].sum()) == len(bench.references)
    info = json.loads((out / "curation_summary.json").read_text())
    assert info["skipped"] == {"tier3": "skipped (--skip-tier3)", "tier4": "skipped (--skip-tier4)"}
    assert info["retry"] == {"max_rate_retries": 6, "rate_base_s": 2.0, "max_server_retries": 3,
                             "server_base_s": 1.0, "max_sleep_s": 120.0, "scale": 0.0}
    assert "blocks_carved" in captured.out and "skipped" in captured.out
    readme = (out / "README.md").read_text()
    assert "Mapillary contributors, CC BY-SA 4.0" in readme and "OpenStreetMap contributors" in readme

    # the token appears nowhere: not in output, logs, files, or any URL we sent
    assert TOKEN not in captured.out + captured.err + caplog.text
    assert _files_containing(out, TOKEN) == [] and _files_containing(out, "pipeline-secret") == []
    assert mapillary.token_in_url == 0

    # the same image may belong to several nearby blocks
    per_image = pd.Series([r.image_id for r in bench.references]).value_counts()
    shared = sel[sel["spatial_pass"]].groupby("image_id")["block_id"].nunique()
    assert (shared > 1).any()
    assert per_image.max() >= 1

    # the benchmark can be scored: a copy of a gallery as a "generated" panel
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.evaluation import evaluate_panels

    encoder = get_encoder("efficientnet-lite0", device="cpu")
    block_id = bench.block_ids[0]
    panel = [r.image_bytes for r in bench.gallery(block_id)[:2]]
    res = evaluate_panels(bench, {("copy", "L0", block_id): panel}, encoder, progress=False)
    assert len(res) == 1 and np.isfinite(res["cos_sim"].iloc[0])

    # running again changes nothing and redoes no network work (abandoned slow responses counted first)
    mapillary.wait_idle()
    overpass.wait_idle()
    n_requests = mapillary.count() + overpass.count()
    assert main(_argv(tmp_path, out, overpass, mapillary, "--skip-tier3", "--skip-tier4")) == 0
    assert mapillary.count() + overpass.count() == n_requests
    assert load_benchmark(out).fingerprint == bench.fingerprint
    assert "resumed from checkpoint" in capsys.readouterr().err


def test_retries_follow_the_real_schedule(world, servers, tmp_path, monkeypatch):
    """The library call with a recording sleep: 429 sleeps 2 s first, 5xx 1 s first; the policy is recorded."""
    from geofidelity_bench.curation import run_curation

    overpass, mapillary = servers
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    overpass.fail_next("interpreter", 429, count=1)
    overpass.fail_next("interpreter", 504, count=1)
    mapillary.fail_next("/images", 429, count=2)
    mapillary.fail_next("/thumbs/", 503, count=1)
    sleeps: list[float] = []
    retry = RetryPolicy(max_server_retries=2, sleep=sleeps.append)
    out = tmp_path / "bench"
    config = CurationConfig(min_images=5, max_images_per_block=8, skip_tier3=True, skip_tier4=True, progress=False)
    result = run_curation([HELSINKI], out, config, overpass_endpoints=[f"{overpass.url}/api/interpreter"],
                          mapillary_url=mapillary.url, timeout_s=5, max_workers=1, retry=retry, log=lambda m: None)
    assert result.benchmark is not None
    # Overpass: 429 -> 2 s, then 504 -> 1 s; Mapillary search: 429 -> 2 s, 429 -> 4 s; a thumbnail: 503 -> 1 s
    assert sorted(sleeps) == [1.0, 1.0, 2.0, 2.0, 4.0]
    assert overpass.count("interpreter", 429) == 1 and mapillary.count("/images", 429) == 2
    info = json.loads((out / "curation_summary.json").read_text())
    assert info["retry"] == {**RetryPolicy().as_dict(), "max_server_retries": 2}


def _curator(world, overpass, mapillary, out, cities=(OAKLAND, HELSINKI), **config_kw) -> Curator:
    retry = RetryPolicy(sleep=lambda s: None)
    client = MapillaryClient(TOKEN, base_url=mapillary.url, retry=retry, max_workers=4, timeout_s=5)
    from geofidelity_bench.curation.osm import OverpassClient

    config = CurationConfig(min_images=5, max_images_per_block=8, progress=False, **config_kw)
    osm_files = {"west_oakland": OSM / "west_oakland.osm.bz2"} if OAKLAND in cities else {}
    return Curator(list(cities), out, config, osm_files=osm_files,
                   overpass=OverpassClient([f"{overpass.url}/api/interpreter"], retry=retry,
                                           cache_dir=out / "_work" / "overpass_cache"),
                   mapillary=client, log=lambda msg: None)


def test_an_interrupted_run_resumes_without_redoing_finished_stages(world, servers, tmp_path, monkeypatch):
    import geofidelity_bench.curation.pipeline as pipeline

    overpass, mapillary = servers
    out = tmp_path / "bench"
    real = pipeline.tier5_filter
    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("power cut during tier 5")
        return real(*args, **kw)

    monkeypatch.setattr(pipeline, "tier5_filter", flaky)
    carve_calls = {"n": 0}
    real_carve = Curator.carve_city

    def counting_carve(self, city):
        carve_calls["n"] += 1
        return real_carve(self, city)

    monkeypatch.setattr(Curator, "carve_city", counting_carve)
    with pytest.raises(RuntimeError, match="power cut"):
        _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    assert carve_calls["n"] == 2
    searches, thumbs, interp = mapillary.count("/images"), mapillary.count("/thumbs/"), overpass.count()
    assert thumbs > 0

    result = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    assert carve_calls["n"] == 2  # not carved again
    assert (mapillary.count("/images"), mapillary.count("/thumbs/"), overpass.count()) == (searches, thumbs, interp)
    assert result.resumed[:4] == ["carve", "metadata", "spatial_tier1", "download"]
    assert "tier5" in result.computed and "select" in result.computed
    assert result.benchmark is not None

    # a changed tier-5 threshold re-runs tier 5 and selection only, from the images on disk
    strict = _curator(world, overpass, mapillary, tmp_path / "bench", skip_tier3=True, skip_tier4=True)
    strict.config.thresholds = FilterThresholds(min_colorfulness=1e9)
    with_strict = strict.run()
    assert with_strict.benchmark is None and set(with_strict.computed) == {"tier5", "select"}
    assert mapillary.count("/thumbs/") == thumbs
    assert int(with_strict.summary["pass_tier5"].sum()) == 0


def test_a_block_whose_search_fails_is_recorded_and_searched_again_by_a_rerun(world, servers, tmp_path):
    overpass, mapillary = servers
    from urllib.parse import urlencode

    from geofidelity_bench.curation.mapillary import search_boxes

    clean = _curator(world, overpass, mapillary, tmp_path / "clean", skip_tier3=True, skip_tier4=True).run()
    probe = MapillaryClient(TOKEN, base_url=mapillary.url)
    box = next(b for block in world["blocks"] for b in search_boxes(block.polyline)
               if len(probe.search_box(b)) > 20)  # a box with a second page (pages of 20)
    bbox = urlencode({"bbox": ",".join(f"{v:.7f}" for v in box)})
    mapillary.fail_next(rf"/images[?]{re.escape(bbox)}.*after=", 500, count=10_000)  # fails even after retries
    out = tmp_path / "bench"
    first = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    failed = sorted(k.split(" ", 1)[1] for k in first.skipped if k.startswith("search "))
    assert failed and all("HTTP 500" in first.skipped[f"search {b}"] for b in failed)
    assert "re-run to search it again" in first.skipped[f"search {failed[0]}"]
    assert not set(failed) & {b.block_id for b in (first.benchmark.blocks if first.benchmark else [])}
    summary = json.loads((out / "curation_summary.json").read_text(encoding="utf-8"))
    assert set(summary["skipped"]) >= {f"search {b}" for b in failed}

    mapillary.clear_faults()
    again = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    assert not [k for k in again.skipped if k.startswith("search ")]
    assert "metadata" in again.computed and "spatial_tier1" in again.computed  # later stages redone
    assert again.benchmark is not None and again.benchmark.fingerprint == clean.benchmark.fingerprint


def test_thumbnails_that_failed_are_downloaded_again_by_a_rerun(world, servers, tmp_path):
    """Thumbnails that fail beyond the retries are listed as missing; the next run tries them again and,
    once the image server serves them, the benchmark is the one a clean run gives."""
    overpass, mapillary = servers
    clean = _curator(world, overpass, mapillary, tmp_path / "clean", skip_tier3=True, skip_tier4=True).run()
    kept = sorted({r.image_id for r in clean.benchmark.references})[:3]  # photos the clean benchmark holds
    for image_id in kept:
        mapillary.fail_next(rf"/thumbs/{image_id}[.]jpg", 503, count=10_000)  # fails even after the retries
    out = tmp_path / "bench"
    first = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    summary = json.loads((out / "curation_summary.json").read_text(encoding="utf-8"))
    assert sorted(m["image_id"] for m in summary["missing_thumbnails"]) == kept
    assert all("HTTP 503" in m["error"] for m in summary["missing_thumbnails"])
    assert not kept_in(first, kept) and first.benchmark.fingerprint != clean.benchmark.fingerprint

    mapillary.clear_faults()  # the image server recovers
    n_thumbs = mapillary.count("/thumbs/")
    again = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    assert mapillary.count("/thumbs/") - n_thumbs == len(kept)  # only what failed is fetched again
    assert "download" in again.computed and "tier5" in again.computed and "select" in again.computed
    summary = json.loads((out / "curation_summary.json").read_text(encoding="utf-8"))
    assert summary["missing_thumbnails"] == [] and all(row["download_failed"] == 0 for row in summary["summary"])
    assert again.benchmark.fingerprint == clean.benchmark.fingerprint
    # a third run has nothing to retry: every stage resumes
    third = _curator(world, overpass, mapillary, out, skip_tier3=True, skip_tier4=True).run()
    assert "download" in third.resumed and mapillary.count("/thumbs/") - n_thumbs == len(kept)


def kept_in(result, image_ids) -> bool:
    return bool({r.image_id for r in result.benchmark.references} & set(image_ids))


@pytest.fixture(scope="module")
def steered_siglip_dir(tiny_siglip_curation_dir, world, tmp_path_factory) -> Path:  # noqa: F811
    """The tiny random SigLIP with its text head solved (least squares) so that the target text
    embeds along the mean direction of street photos and the distractors opposite: a tiny model
    that 'prefers' the target for typical photos and not for all, so tier 3 passes some images
    and tier 4 gets work."""
    import torch

    from geofidelity_bench.curation.filters import TIER3_TEXTS
    from geofidelity_bench.encoders import get_encoder

    enc = get_encoder("siglip-so400m", weights=tiny_siglip_curation_dir, device="cpu")
    img = enc.embed(list(world["jpegs"].values())[:40], progress=False).astype(np.float64)
    img /= np.linalg.norm(img, axis=1, keepdims=True)
    m = img.mean(axis=0)
    m /= np.linalg.norm(m)
    head = enc.model.text_model.head
    with torch.no_grad():
        head.weight.copy_(torch.eye(head.weight.shape[0]))
        head.bias.zero_()
    h = enc.embed_text([t for _, t in TIER3_TEXTS]).astype(np.float64)  # pooled states before the head
    targets = np.stack([m] + [-m] * (len(TIER3_TEXTS) - 1))
    w = targets.T @ np.linalg.pinv(h.T)
    np.testing.assert_allclose(w @ h.T, targets.T, atol=1e-6)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(w).float())
    path = tmp_path_factory.mktemp("steered-siglip")
    enc.model.save_pretrained(path)
    enc.tokenizer.save_pretrained(path)
    return path


def test_tiers_3_and_4_run_through_the_models(world, servers, tmp_path, tiny_m2f_dir, steered_siglip_dir):
    overpass, mapillary = servers
    out = tmp_path / "bench"
    # Helsinki only (one block, 15 images): the tiny Mask2Former labels full-size maps, ~0.3 s per image
    cur = _curator(world, overpass, mapillary, out, cities=(HELSINKI,), siglip_weights=str(steered_siglip_dir),
                   segmenter_weights=str(tiny_m2f_dir), segmenter_kwargs={"input_size": 64, "max_input_size": 128},
                   device="cpu")
    first = cur.run()
    work = out / "_work"
    t3 = pd.read_parquet(work / "05_tier3" / "tier3.parquet")
    assert t3["tier3_pass"].sum() > 0 and first.skipped == {}
    # re-tune the tier-3 threshold between two measured probabilities: only tier 3 onwards re-runs
    # (SigLIP embeddings come from the cache), nothing is searched or downloaded again
    p = np.sort(t3["p_target"].to_numpy())
    cut = float((p[len(p) // 2 - 1] + p[len(p) // 2]) / 2)
    n_requests = mapillary.count() + overpass.count()
    cur2 = _curator(world, overpass, mapillary, out, cities=(HELSINKI,), siglip_weights=str(steered_siglip_dir),
                    segmenter_weights=str(tiny_m2f_dir), segmenter_kwargs={"input_size": 64, "max_input_size": 128},
                    device="cpu")
    cur2.config.thresholds = FilterThresholds(tier3_min_prob=cut)
    result = cur2.run()
    assert mapillary.count() + overpass.count() == n_requests
    assert result.resumed == ["carve", "metadata", "spatial_tier1", "download"]

    dl = pd.read_parquet(work / "04_download" / "download.parquet")
    t3 = pd.read_parquet(work / "05_tier3" / "tier3.parquet")
    assert set(t3["image_id"]) == set(dl["image_id"])
    probs = t3[[c for c in t3.columns if c.startswith("p_")]].to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert (t3["tier3_pass"] == ((probs.argmax(axis=1) == 0) & (probs[:, 0] >= cut))).all()
    assert 0 < t3["tier3_pass"].sum() < len(t3)
    t4 = pd.read_parquet(work / "06_tier4" / "tier4.parquet")
    assert set(t4["image_id"]) == set(t3.loc[t3["tier3_pass"], "image_id"])  # in order: tier 4 sees tier-3 passes
    shares = t4[[c for c in t4.columns if c.startswith("share_")]].to_numpy()
    assert shares.shape[1] == 12 and (shares.sum(axis=1) <= 1 + 1e-6).all()
    t5 = pd.read_parquet(work / "07_tier5" / "tier5.parquet")
    assert set(t5["image_id"]) == set(t4.loc[t4["tier4_pass"], "image_id"])
    row = result.summary.set_index("city").loc["helsinki"]
    assert int(row["downloaded"]) > int(row["pass_tier3"]) == int(t3["tier3_pass"].sum())
    assert int(row["pass_tier3"]) >= int(row["pass_tier4"]) >= int(row["pass_tier5"])
    sel = pd.read_parquet(work / "08_select" / "select.parquet")
    eligible = sel[sel["eligible"]]
    assert eligible["image_id"].isin(t4.loc[t4["tier4_pass"], "image_id"]).all()
    # selection ranks by urbanness first (the tier-4 measurement), descending
    for _, grp in eligible.groupby("block_id"):
        ordered = grp.sort_values("rank")
        assert (np.diff(ordered["urbanness"].to_numpy()) <= 1e-12).all()


def test_offline_without_model_weights_fails_early_with_a_clear_message(world, servers, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from geofidelity_bench.cli import main

    overpass, mapillary = servers
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    out = tmp_path / "bench"
    assert main(_argv(tmp_path, out, overpass, mapillary)) == 2
    err = capsys.readouterr().err
    assert "tier 3" in err and "google/siglip-so400m-patch14-384" in err
    assert "--siglip-weights PATH" in err and "--skip-tier3" in err
    assert main(_argv(tmp_path, out, overpass, mapillary, "--skip-tier3")) == 2
    err = capsys.readouterr().err
    assert "tier 4" in err and "facebook/mask2former-swin-large-mapillary-vistas-semantic" in err
    assert "--segmenter-weights PATH" in err and "--skip-tier4" in err
    assert mapillary.count() == 0 and overpass.count() == 0  # failed before any network stage


def test_missing_token_fails_before_any_request(servers, tmp_path, monkeypatch, capsys):
    from geofidelity_bench.cli import main

    overpass, mapillary = servers
    monkeypatch.delenv("MAPILLARY_TOKEN", raising=False)
    assert main(_argv(tmp_path, tmp_path / "b", overpass, mapillary, "--skip-tier3", "--skip-tier4")) == 2
    assert "MAPILLARY_TOKEN" in capsys.readouterr().err
    assert mapillary.count() == 0 and overpass.count() == 0


def test_a_service_that_stays_down_stops_the_run_with_a_redacted_error_and_resumes_later(
        world, servers, tmp_path, monkeypatch, capsys):
    from geofidelity_bench.cli import main

    overpass, mapillary = servers
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    mapillary.fail_next("/images", 503, count=1000)
    out = tmp_path / "bench"
    argv = _argv(tmp_path, out, overpass, mapillary, "--skip-tier3", "--skip-tier4")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Mapillary search failed" in err and "HTTP 503" in err and TOKEN not in err
    assert (out / "_work" / "01_carve" / "cities" / "helsinki.parquet").is_file()
    n_overpass = overpass.count()
    mapillary._faults.clear()  # the service is back
    assert main(argv) == 0
    assert overpass.count() == n_overpass  # carving came from its checkpoint
    assert _files_containing(out, TOKEN) == []


def test_curate_argument_errors(tmp_path, capsys, monkeypatch):
    from geofidelity_bench.cli import main

    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    assert main(["curate", "--out", str(tmp_path / "x")]) == 2
    assert "--cities" in capsys.readouterr().err
    assert main(["curate", "--cities", "paris", "--out", str(tmp_path / "x"), "--osm-file", "paris"]) == 2
    assert "CITY=PATH" in capsys.readouterr().err
    assert main(["curate", "--cities", "paris", "--out", str(tmp_path / "x"), "--min-images", "2", "--skip-tier3",
                 "--skip-tier4"]) == 2
    assert "min_images must be >= 3" in capsys.readouterr().err
    assert main(["curate", "--cities", "paris", "--out", str(tmp_path / "x"), "--skip-tier3", "--segmenter", "nope"]) == 2
    assert "unknown segmenter 'nope'" in capsys.readouterr().err
    assert main(["curate", "--cities", "paris", "--out", str(tmp_path / "x"), "--retry-delay-scale", "-1"]) == 2
    assert "--retry-delay-scale must be >= 0, got -1.0" in capsys.readouterr().err
    with pytest.raises(CurationError, match="not curated"):
        Curator([OAKLAND], tmp_path / "y", osm_files={"paris": OSM / "west_oakland.osm.bz2"})


def test_a_curated_benchmark_records_what_ran_and_its_card_says_only_that(world, servers, tmp_path, monkeypatch,
                                                                          capsys):
    """issue 33 section 4: skipped tiers are recorded as skipped (null in select.parquet, no model named), the
    same-neighborhood negative says whether it is a fallback, and the cards are written from the record."""
    from geofidelity_bench.cli import main
    from geofidelity_bench.geo import haversine_m

    overpass, mapillary = servers
    monkeypatch.setenv("MAPILLARY_TOKEN", TOKEN)
    monkeypatch.chdir(tmp_path)  # the benchmark is named by a relative path, as a user types it
    out = Path("work") / "lund_curated"
    assert main(_argv(tmp_path, out, overpass, mapillary, "--skip-tier3", "--skip-tier4")) == 0
    capsys.readouterr()

    # skipped tiers: measured nothing, so null (never True) in select.parquet; eligibility from the tiers that ran
    sel = pd.read_parquet(out / "_work" / "08_select" / "select.parquet")
    assert sel["tier3_pass"].isna().all() and sel["tier4_pass"].isna().all()
    expected = sel["spatial_pass"] & sel["tier1_pass"] & sel["downloaded"] & sel["tier5_pass"].astype(bool)
    assert (sel["eligible"] == expected).all() and sel["eligible"].any()
    record = json.loads((out / "curation_summary.json").read_text())
    assert record["config"]["tiers_skipped"] == ["tier3", "tier4"]
    assert record["config"]["tiers_run"] == ["spatial", "tier1", "tier5"]
    assert record["config"]["siglip_weights"] is None and record["config"]["segmenter"] is None
    assert "tier3_min_prob" not in record["config"]["thresholds"]
    assert "google/siglip" not in json.dumps(record) and "mask2former" not in json.dumps(record)

    # the same-neighborhood negative's kind, checked against the rule of docs/benchmark.md section 8
    bench = load_benchmark(out)
    by_id = {b.block_id: b for b in bench.blocks}
    kinds = {}
    for b in bench.blocks:
        if b.neg_same_neighborhood is None:
            assert b.neg_same_neighborhood_kind is None
            continue
        neg = by_id[b.neg_same_neighborhood]
        near = haversine_m(*b.centroid, *neg.centroid) <= 1000.0
        label = (b.neighborhood or "").strip()
        same = near and bool(label) and label.lower() != "downtown" and neg.neighborhood == label
        want = "same_neighborhood" if same else "fallback_nearby" if near else "fallback_far"
        assert b.neg_same_neighborhood_kind == want, b.block_id
        kinds[want] = kinds.get(want, 0) + 1
    fallbacks = kinds.get("fallback_nearby", 0) + kinds.get("fallback_far", 0)
    assert fallbacks > 0  # West Oakland has no neighborhood names: its negatives are fallbacks
    assert record["benchmark"]["name"] == "lund_curated" and record["benchmark"]["fingerprint"] == bench.fingerprint
    assert {k: v for k, v in record["benchmark"]["same_neighborhood_kinds"].items() if v} == kinds

    # the folder's own card: the curation provenance, skipped tiers as skipped
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "**skipped** (`--skip-tier3`)" in readme and "**skipped** (`--skip-tier4`)" in readme
    assert "SigLIP `" not in readme and "segmenter `" not in readme
    assert f"within {record['config']['thresholds']['max_distance_m']:g} m" in readme

    # the Hub card of build-dataset: written from the record, named by name, no generator terms, record shipped
    built = Path("built")
    assert main(["build-dataset", str(out), "--out", str(built)]) == 0
    card = (built / "README.md").read_text(encoding="utf-8").split("\n---\n", 1)[1]
    assert "not from the published release" not in card and "do not describe its data" not in card
    assert "Benchmark `lund_curated`" in card and str(out) not in card
    assert "tiers run: spatial, tier1, tier5; skipped: tier3, tier4" in card
    biases = card.split("## Biases and limitations", 1)[1].split("## Licenses", 1)[0]
    assert "SigLIP" not in biases and "segmentation filter" not in biases and "segmentation composition" not in biases
    assert "no model filtered these images (tiers 3 and 4 were skipped)" in biases
    licenses = card.split("## Licenses", 1)[1]
    for generator in ("sdxl", "flux_dev", "CreativeML", "Generated images"):
        assert generator not in licenses, generator
    assert "fallback" in card and "neg_same_neighborhood_kind" in card
    for row in record["summary"]:
        assert f"| {row['city']} | {row['carving_rules']} | {row['blocks_carved']} |" in card
    assert json.loads((built / "curation_summary.json").read_text()) == record
    from geofidelity_bench.hub.push import dataset_groups

    card_group = next(g for g in dataset_groups(built) if g.name == "card")
    assert "curation_summary.json" in card_group.files  # push-dataset uploads it with the card

    assert main(["info", "--benchmark", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("same_neighborhood:"))
    from geofidelity_bench.caveats import SAME_NEIGHBORHOOD_KIND_LABELS

    shown = dict(part.split(" ", 1)[::-1] for part in line.split(":", 1)[1].strip().split(", "))
    assert shown == {SAME_NEIGHBORHOOD_KIND_LABELS[k]: str(n) for k, n in kinds.items()}
