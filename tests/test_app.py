"""The demo app: its library pieces, the ``app`` command, and every API endpoint of a live server
(gradio_client against 127.0.0.1) with good and bad inputs."""

from __future__ import annotations

import io
import math
import re
import shutil
import socket

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import demo_lite0_cache

pytest.importorskip("gradio", reason="the app needs gradio (pip install -e '.[app]')")
pytest.importorskip("gradio_client", reason="the API tests need gradio_client (pip install -e '.[app]')")

# Gradio's queue (not this project) uses pandas options that pandas 3 deprecates.
pytestmark = [
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]
ENDPOINTS = {"/city_blocks", "/explore", "/score", "/leaderboard", "/upload_results", "/reset_results"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: One AppData and one app server for the whole session, whichever test module asks first:
#: tests/test_app_concurrency.py and tests/test_app_browser.py import these fixtures, and
#: tests/test_leaderboard_*.py build their Hub apps on :func:`shared_app_data`. Nothing mutates them
#: (tests that change the results table take a copy).
_SHARED: dict = {}


def shared_app_data(tmp_path_factory):
    """The demo benchmark's AppData with the offline encoder, built once per session."""
    from geofidelity_bench.demo_app import load_app_data

    if "data" not in _SHARED:
        cache = tmp_path_factory.getbasetemp() / "app-embedding-cache"  # also used by the results-CSV test
        if not cache.exists():  # starts as a copy of the session's demo cache: the same photos and encoder
            shutil.copytree(demo_lite0_cache(tmp_path_factory), cache)
        _SHARED["data"] = load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache))
    return _SHARED["data"]


@pytest.fixture(scope="session")
def app_data(tmp_path_factory):
    return shared_app_data(tmp_path_factory)


@pytest.fixture(scope="session")
def server(app_data):
    """The app (no Hub tab) on 127.0.0.1, launched once and shared by every module importing this fixture."""
    from geofidelity_bench.demo_app import build_app, launch

    if "server" in _SHARED:  # another module's copy of this fixture launched it, and closes it
        yield _SHARED["server"]
        return
    demo = build_app(app_data)
    port = free_port()
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    _SHARED["server"] = f"http://127.0.0.1:{port}/"
    try:
        yield _SHARED["server"]
    finally:
        _SHARED.pop("server", None)
        demo.close()


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False, download_files=False, analytics_enabled=False)


def _files(tmp_path, payloads: dict[str, bytes]) -> list[str]:
    paths = []
    for name, data in payloads.items():
        path = tmp_path / name
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def _handles(paths):
    from gradio_client import handle_file

    return [handle_file(p) for p in paths]


def _png(size, mode="RGB", color=0, noise=False) -> bytes:
    if noise:
        rng = np.random.default_rng(0)
        img = Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8))
    else:
        img = Image.new(mode, size, color)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _fresh(n: int, seed: int = 0, prefix: str = "fresh") -> dict[str, bytes]:
    """PNGs of smooth random colour fields: images that copy no photo of the benchmark (the copy audit never
    flags them), so the app scores them as a visitor's result."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        img = Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)).resize(
            (160, 120), Image.Resampling.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        out[f"{prefix}_{i}.png"] = buf.getvalue()
    return out


@pytest.fixture(scope="module")
def fresh_photos(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("fresh-photos"), _fresh(4, seed=3))


@pytest.fixture(scope="module")
def world_photos(app_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("world-photos")
    return _files(folder, {f"world_{i}.jpg": w.image_bytes for i, w in enumerate(app_data.benchmark.world[:4])})


# -- library pieces (no server) ------------------------------------------------------------------


def test_read_uploaded_images_decodes_instead_of_trusting_names(tmp_path, app_data):
    from geofidelity_bench.demo_app import UploadError, read_uploaded_images

    jpg = app_data.benchmark.world[0].image_bytes
    good = _files(tmp_path, {"a.txt": _png((64, 48)), "b.jpg": jpg})  # a PNG named .txt is an image
    images = read_uploaded_images(good, upload_root=tmp_path)
    assert [u.name for u in images] == ["a.txt", "b.jpg"] and images[0].image.size == (64, 48)

    fake = _files(tmp_path, {"fake.jpg": b"this is not a picture, only text" * 10})
    with pytest.raises(UploadError, match="fake.jpg is not an image"):
        read_uploaded_images(good + fake, upload_root=tmp_path)
    with pytest.raises(UploadError, match="at least 2"):
        read_uploaded_images(good[:1], upload_root=tmp_path)
    # a text file named .png alone: named as not an image first (issue 40), then the count
    notes = _files(tmp_path, {"notes.png": b"meeting notes, not a picture\n" * 10})
    with pytest.raises(UploadError, match=r"^notes.png is not an image .*\. A set needs at least 2 images") as err:
        read_uploaded_images(notes, upload_root=tmp_path)
    assert "Upload at least" not in str(err.value)
    with pytest.raises(UploadError, match="at most 16"):
        read_uploaded_images(good * 9, upload_root=tmp_path)
    empty = _files(tmp_path, {"empty.png": b""})
    with pytest.raises(UploadError, match="empty"):
        read_uploaded_images(good + empty, upload_root=tmp_path)


def test_read_uploaded_images_limits_and_paths(tmp_path):
    from geofidelity_bench.demo_app import UploadError, read_uploaded_images

    root = tmp_path / "uploads"
    root.mkdir()
    ok = _files(root, {"ok1.png": _png((32, 32)), "ok2.png": _png((32, 32), color=(200, 10, 10))})
    huge = _files(root, {"huge.png": _png((8000, 5001), mode="L")})  # 40.0 MP + 8000 pixels
    with pytest.raises(UploadError, match="megapixels"):
        read_uploaded_images(ok + huge, upload_root=root)
    big = _files(root, {"big.png": _png((64, 64)) + b"\0" * 2048})
    with pytest.raises(UploadError, match="big.png is .* the limit is"):
        read_uploaded_images(ok + big, upload_root=root, max_bytes=1024)
    outside = _files(tmp_path, {"elsewhere.png": _png((32, 32))})
    with pytest.raises(UploadError, match="not an uploaded file"):
        read_uploaded_images(ok + outside, upload_root=root)
    with pytest.raises(UploadError, match="not an uploaded file"):
        read_uploaded_images(ok + [str(root / ".." / "elsewhere.png")], upload_root=root)


def test_plain_language_readings():
    from geofidelity_bench.demo_app.texts import anchor_comparison, about_markdown, reading

    row = {"retrieval_acc": 0.5, "local_margin": -0.02, "strongest_margin": 0.01, "sim_target": 0.5,
           "sim_same_city": 0.6, "diversity_gap": 0.2, "gaas": float("nan")}
    assert reading("retrieval_acc", row, n_images=4, n_candidates=5) == (
        "2 of 4 images picked the target block out of 5 candidate blocks")
    # one negative block filling two roles is two candidates, and the text says how many blocks that is
    assert reading("retrieval_acc", row, n_images=4, n_candidates=3, n_distinct=2) == (
        "2 of 4 images picked the target block out of 3 candidates (2 distinct blocks)")
    assert "among the 3 candidates (2 distinct blocks) is about 2.0" in reading(
        "mrr", {"mrr": 0.5}, n_images=4, n_candidates=3, n_distinct=2)
    assert "among the 5 candidates is about" in reading("mrr", {"mrr": 0.5}, n_images=4, n_candidates=5, n_distinct=5)
    assert reading("local_margin", row, n_images=4, n_candidates=5).startswith(
        "closer to the same-city alternative than to the target")
    assert reading("strongest_margin", row, n_images=4, n_candidates=5).startswith("closer to the target")
    assert "less varied" in reading("diversity_gap", row, n_images=4, n_candidates=5)
    assert "segmenter" in reading("gaas", row, n_images=4, n_candidates=5, nan_reason="needs a segmenter")
    assert "at least as much" in reading("sim_same_city", row, n_images=4, n_candidates=5)
    text = anchor_comparison("cos_sim", 0.7, {"heldout_real": 0.9, "random_global": 0.3})
    assert "better than random photos from anywhere (0.300)" in text and "worse than held-out" in text
    assert "lower is better" in about_markdown() and "Real-image anchors" in about_markdown()


def test_leaderboard_table_sorts_and_filters(app_data):
    from geofidelity_bench.caveats import COPIED_MARK
    from geofidelity_bench.demo_app import results as lb

    res = app_data.results
    table = lb.leaderboard_table(res, condition="anchor", sort_by="DCSF ↓")
    assert set(table["condition"]) == {"anchor"} and len(table) == 3
    dcsf = table["DCSF ↓"].tolist()
    assert dcsf == sorted(dcsf)
    worst_first = lb.leaderboard_table(res, condition="anchor", sort_by="DCSF ↓", best_first=False)
    assert worst_first["DCSF ↓"].tolist() == dcsf[::-1]
    per_block = lb.leaderboard_table(res, view=lb.VIEWS[1], sort_by="CosSim ↑")
    assert len(per_block) == len(res)
    for _, rows in per_block.groupby("block_id"):  # ranked within each block (issue 31)
        copied = rows["notes"].str.contains(COPIED_MARK, regex=False)  # the sanity panels: listed after the rest
        assert not copied.iloc[: int((~copied).sum())].any()
        assert rows[~copied]["CosSim ↑"].is_monotonic_decreasing and rows[copied]["CosSim ↑"].is_monotonic_decreasing
    with pytest.raises(lb.ResultsError, match="unknown condition"):
        lb.leaderboard_table(res, condition="L9")
    with pytest.raises(lb.ResultsError, match="no column"):
        lb.check_results(pd.DataFrame({"method": ["a"], "cos_sim": [0.1]}))
    assert lb.empty_metrics(res) == ["GAAS ↓"]


def test_app_data_prompts_anchors_and_scoring_agree(app_data):
    from geofidelity_bench.evaluation import anchor_panels

    bench = app_data.benchmark
    views = {v.condition: v for v in app_data.prompts("lund_seg1")}
    assert views["L0"].text.startswith("A street-level photograph taken in Lund, SE.")
    assert views["L1"].text is None and views["L1"].shown.startswith("not available: block 'lund_seg1' has no")
    berlin = {v.condition: v for v in app_data.prompts("berlin_am_lustgarten")}
    assert "Am Lustgarten in the Mitte district of Berlin" in berlin["L1"].text
    anchors = app_data.anchors_of("lund_seg1")
    assert set(anchors) == {"heldout_real", "random_same_country", "random_global"}
    # Scoring the held-out anchor panel through the app gives the anchor's own row, up to the float noise of
    # batching: uploads are embedded fresh, in their own batch, the anchors' photos came from the cache
    # (exclude_copies=False: the benchmark's own photos are copies, which a visitor never gets scored)
    panel = anchor_panels(bench)[("heldout_real", "anchor", "lund_seg1")]
    scored = app_data.score("lund_seg1", [r.image_bytes for r in panel], exclude_copies=False)
    for key in ("cos_sim", "mmd", "dcsf", "retrieval_acc", "local_margin"):
        assert math.isclose(scored.row[key], anchors["heldout_real"][key], rel_tol=1e-5, abs_tol=1e-7), key
    assert scored.retrieval.best_candidate == ["target"] * 4
    assert [r[3] for r in scored.ranking_rows()] == ["1 of 5"] * 4
    assert len(scored.near_copies) == 4 and not scored.copies_left_out
    # as a visitor's upload they are copies: nothing is scored, and nothing reads as a result
    withheld = app_data.score("lund_seg1", [r.image_bytes for r in panel])
    assert not withheld.scored and "a panel needs at least 2 images that are not copies" in withheld.withheld
    assert withheld.names == [] and len(withheld.copies_left_out) == 4 and withheld.ranking_rows() == []
    assert all(math.isnan(withheld.row[k]) for k in ("cos_sim", "retrieval_acc", "mrr"))
    assert withheld.row["n_copied"] == 4


def test_map_figure_and_off_map_negatives(app_data):
    from geofidelity_bench.demo_app import figures

    off = figures.off_map_negatives(app_data.benchmark, "lund_seg1")
    assert any(line.startswith("same driving side: berlin_am_lustgarten in Berlin (DE)") for line in off)
    assert any(line.startswith("random city: arezzo_park_path in Arezzo (IT)") for line in off)
    fig = figures.block_map_figure(app_data.benchmark, "lund_seg1")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["target: lund_seg1", "same neighborhood + same city: lund_seg2"]


def test_app_command_is_registered_and_checks_results_file(tmp_path, capsys):
    from geofidelity_bench.cli import build_parser, main

    args = build_parser().parse_args(["app", "--port", "7999", "--results", "r.csv"])
    assert (args.benchmark, args.encoder, args.host, args.port, args.results) == (
        "demo", "efficientnet-lite0", "127.0.0.1", 7999, "r.csv")
    assert main(["app", "--results", str(tmp_path / "missing.csv"), "--no-cache"]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_space_folder_is_a_thin_gradio_space():
    from pathlib import Path

    import gradio

    root = Path(__file__).resolve().parents[1] / "spaces_app"
    readme = (root / "README.md").read_text(encoding="utf-8")
    front = readme.split("---")[1]
    meta = dict(line.split(":", 1) for line in front.strip().splitlines())
    meta = {k.strip(): v.strip() for k, v in meta.items()}
    for key in ("title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "app_file", "pinned", "license"):
        assert meta.get(key), key
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert meta["sdk_version"].split(".")[0] == gradio.__version__.split(".")[0]
    app = (root / "app.py").read_text(encoding="utf-8")
    assert "geofidelity_bench.demo_app" in app and len(app.splitlines()) < 40
    assert "geofidelity-bench[app]" in (root / "requirements.txt").read_text(encoding="utf-8")
    for source in [app, *(p.read_text(encoding="utf-8") for p in
                          (Path(__file__).resolve().parents[1] / "geofidelity_bench" / "demo_app").glob("*.py"))]:
        assert "share=True" not in source


# -- the live server -----------------------------------------------------------------------------


def test_every_endpoint_is_named(client):
    api = client.view_api(print_info=False, return_format="dict")
    assert set(api["named_endpoints"]) == ENDPOINTS
    assert not api["unnamed_endpoints"]


def test_city_blocks(client):
    from gradio_client.exceptions import AppError

    update = client.predict("lund", api_name="/city_blocks")
    assert update["value"] == "lund_seg1"
    assert [c[1] for c in update["choices"]] == ["lund_seg1", "lund_seg2", "lund_seg3"]
    with pytest.raises(AppError, match="atlantis"):
        client.predict("atlantis", api_name="/city_blocks")


def test_explore(client):
    from gradio_client.exceptions import AppError

    gallery, plot, metadata, *prompts = client.predict("lund_seg1", api_name="/explore")
    captions = [item["caption"] for item in gallery]
    assert len(captions) == 10 and sum(c.startswith("HELD-OUT") for c in captions) == 4
    assert plot["type"] == "matplotlib" and plot["plot"]
    assert "`lund_seg2`" in metadata and "Off the map" in metadata and "heldout_real" in metadata
    assert len(prompts) == 7
    by_label = {p["label"].split(" ")[0]: p for p in prompts}
    assert by_label["L0"]["value"].startswith("A street-level photograph taken in Lund, SE.")
    assert by_label["L1"]["value"].startswith("not available: block 'lund_seg1' has no street_name")
    assert "gfb-unavailable" in by_label["L2"]["elem_classes"]
    _, _, berlin_md, *bp = client.predict("berlin_am_lustgarten", api_name="/explore")
    assert "Am Lustgarten" in bp[1]["value"] and "Mitte" in berlin_md
    # Berlin is the only block with names: no donor for the controls, refused with the reason.
    assert bp[4]["value"].startswith("not available: block 'berlin_am_lustgarten': no other block has a known")
    assert "none in this benchmark" in berlin_md
    with pytest.raises(AppError, match="unknown block_id 'nope'"):
        client.predict("nope", api_name="/explore")


def test_score_fresh_images(client, fresh_photos, app_data):
    status, warning, pairs, scores_md, ranking, shown, plot, raw = client.predict(
        "lund_seg1", _handles(fresh_photos), api_name="/score")
    assert "Scored **4 images**" in status and "efficientnet-lite0" in status
    assert warning == "" and pairs["visible"] is False
    assert raw["n_images"] == raw["n_uploaded"] == 4 and raw["copies_left_out"] == [] and raw["withheld"] is None
    assert raw["block_id"] == "lund_seg1" and raw["encoder"] == "efficientnet-lite0"
    for key in ("cos_sim", "mmd", "dcsf", "retrieval_acc", "mrr", "local_margin", "strongest_margin"):
        assert isinstance(raw["scores"][key], float), key
    assert raw["scores"]["gaas"] is None and "segmenter" in raw["nan_reasons"]["gaas"]
    hits = round(raw["scores"]["retrieval_acc"] * 4)
    negatives = [b for b in app_data.benchmark.negatives("lund_seg1").values() if b is not None]
    n_cand, n_blocks = 1 + len(negatives), len({"lund_seg1", *negatives})
    assert n_cand == 5 and n_blocks == 4  # one lund block is two negatives: honest counting matters here
    assert f"{hits} of 4 images picked the target block out of 5 candidates (4 distinct blocks)" in scores_md
    assert scores_md.startswith("**In short:**")
    assert ("closer to the same-city alternative than to the target" in scores_md) == (
        raw["scores"]["local_margin"] < 0)
    assert set(raw["anchors"]) == {"heldout_real", "random_same_country", "random_global"}
    assert [r[1] for r in ranking["data"]] == [f"fresh_{i}.png" for i in range(4)]
    assert [item["best_candidate"] for item in raw["per_image"]] and all(
        item["best_candidate"] in raw["candidates"] for item in raw["per_image"])
    assert len(shown) == 4 and plot["type"] == "matplotlib"


def test_score_world_photos_are_copies_and_never_a_result(client, world_photos):
    """The world pool is the benchmark's own: each upload is a copy, named beside its photo, and nothing is
    scored (issue 40): no reading, no row, no thumbnail, no plot; the JSON says why."""
    status, warning, pairs, scores_md, ranking, shown, plot, raw = client.predict(
        "lund_seg1", _handles(world_photos), api_name="/score")
    assert status.startswith("**Not scored:** 4 of the 4 uploaded images copy this benchmark's photos")
    assert "4 of 4 uploaded images are copies of this benchmark's own photos" in warning
    assert "**Nothing is scored:**" in warning
    assert all(r["flagged"] and r["reference_block_id"] == "world" for r in raw["copy_audit"])
    assert all(f"`{r['reference_id']}`** of the world pool" in warning for r in raw["copy_audit"])
    assert pairs["visible"] is True and len(pairs["value"]) == 8
    assert scores_md == "" and ranking["data"] == [] and shown == [] and plot is None
    assert raw["n_images"] == 0 and raw["n_uploaded"] == 4 and raw["per_image"] == []
    assert raw["copies_left_out"] == [f"world_{i}.jpg" for i in range(4)] and "not copies" in raw["withheld"]
    assert all(v is None for v in raw["scores"].values())


def test_heldout_photos_pick_the_target_but_are_never_a_visitors_result(client, app_data, tmp_path):
    """The block's held-out photos pick the target (the scoring itself, exclude_copies=False); uploaded, they
    are copies of the benchmark's photos and are not scored."""
    held = app_data.benchmark.heldout("lund_seg2")
    scored = app_data.score("lund_seg2", [r.image_bytes for r in held], exclude_copies=False)
    assert "4 of 4 images picked the target block" in scored.readings()["retrieval_acc"]
    assert all(r[2] == "the target block ✓" for r in scored.ranking_rows())
    assert scored.row["local_margin"] > 0
    assert "closer to the target than to the same-city" in scored.readings()["local_margin"]
    photos = _files(tmp_path, {f"held_{i}.jpg": r.image_bytes for i, r in enumerate(held)})
    status, warning, _, scores_md, ranking, _, plot, raw = client.predict("lund_seg2", _handles(photos),
                                                                          api_name="/score")
    assert "Not scored" in status and "4 of 4 uploaded images are copies" in warning
    assert scores_md == "" and ranking["data"] == [] and plot is None and raw["withheld"]


def test_score_warns_when_uploads_copy_the_blocks_reference_photos(client, app_data, world_photos, tmp_path):
    gallery = app_data.benchmark.gallery("lund_seg1")[:2]
    photos = _files(tmp_path, {f"copy_{i}.jpg": r.image_bytes for i, r in enumerate(gallery)})
    fresh = _files(tmp_path, {"fresh.png": _png((96, 64), noise=True), "fresh2.png": _png((80, 60), noise=True)})
    status, warning, pairs, scores_md, ranking, shown, plot, raw = client.predict(
        "lund_seg1", _handles(photos + fresh[:1]), api_name="/score")
    assert "2 of 3 uploaded images are copies of this benchmark's own photos" in warning
    assert "copy\\_0.jpg" in warning and gallery[1].reference_id in warning and "fresh" not in warning  # names escaped
    assert [p["caption"] for p in pairs["value"]] == [
        "your image: copy_0.jpg", f"benchmark photo: {gallery[0].reference_id}",
        "your image: copy_1.jpg", f"benchmark photo: {gallery[1].reference_id}"]
    # one image left once the copies are left out: nothing is scored (a set needs 2)
    assert "Not scored" in status and scores_md == "" and plot is None and raw["copies_left_out"] == [
        "copy_0.jpg", "copy_1.jpg"]
    # with two images that are not copies: those two are scored, and only they
    status, warning, pairs, scores_md, ranking, shown, plot, raw = client.predict(
        "lund_seg1", _handles(photos + fresh), api_name="/score")
    assert "Scored **2 of 4 images**" in status and "2 copies of the benchmark's photos left out" in status
    assert "**Left out of every score below:**" in warning
    assert scores_md.startswith("**In short (of the 2 images that are not copies; 2 copies left out):** ")
    assert "of 2 images picked the target block" in scores_md
    assert [r[1] for r in ranking["data"]] == ["fresh.png", "fresh2.png"] and len(shown) == 2
    assert raw["n_images"] == 2 and raw["n_uploaded"] == 4 and [i["image"] for i in raw["per_image"]] == [
        "fresh.png", "fresh2.png"]
    alone = client.predict("lund_seg1", _handles(fresh), api_name="/score")[7]
    assert raw["scores"] == alone["scores"]  # the numbers of the two new images, as if uploaded alone
    assert plot["type"] == "matplotlib"
    status, warning, pairs, *_ = client.predict("lund_seg1", _handles(fresh), api_name="/score")
    assert warning == "" and pairs["visible"] is False


def test_score_refuses_bad_input(client, world_photos, tmp_path):
    from gradio_client.exceptions import AppError

    fake = _files(tmp_path, {"not_an_image.jpg": b"%PDF-1.4 definitely not a picture\n" * 50})
    with pytest.raises(AppError, match="not_an_image.jpg is not an image"):
        client.predict("lund_seg1", _handles(world_photos[:2] + fake), api_name="/score")
    with pytest.raises(AppError, match="at most 16 images .*17"):
        client.predict("lund_seg1", _handles((world_photos * 5)[:17]), api_name="/score")
    with pytest.raises(AppError, match="at least 2 .*you gave 1"):
        client.predict("lund_seg1", _handles(world_photos[:1]), api_name="/score")
    with pytest.raises(AppError, match="at least 2 .*you gave 0"):
        client.predict("lund_seg1", [], api_name="/score")
    huge = _files(tmp_path, {"huge.png": _png((8000, 5001), mode="L")})
    with pytest.raises(AppError, match="huge.png: the image is 8000x5001 .* limit is 40 megapixels"):
        client.predict("lund_seg1", _handles(world_photos[:1] + huge), api_name="/score")
    heavy = _files(tmp_path, {"heavy.png": _png((1900, 1900), noise=True)})  # ~10.3 MB of noise
    assert 10 * 1024 * 1024 < (tmp_path / "heavy.png").stat().st_size < 20 * 1024 * 1024
    with pytest.raises(AppError, match="heavy.png is 1[0-9].[0-9] MB; the limit is 10.0 MB"):
        client.predict("lund_seg1", _handles(world_photos[:1] + heavy), api_name="/score")
    with pytest.raises(AppError, match="unknown block_id 'no_such_block'"):
        client.predict("no_such_block", _handles(world_photos[:2]), api_name="/score")


def test_leaderboard_and_results_upload(client, app_data, tmp_path):
    from gradio_client.exceptions import AppError

    default = client.predict("all conditions", "CosSim ↑", True, "mean per method and condition",
                             api_name="/leaderboard")
    assert len(default["data"]) == 5 and "CosSim ↑" in default["headers"]
    anchors = client.predict("anchor", "DCSF ↓", True, "mean per method and condition", api_name="/leaderboard")
    col = anchors["headers"].index("DCSF ↓")
    assert [r[2] for r in anchors["data"]] == ["anchor"] * 3
    assert [r[col] for r in anchors["data"]] == sorted(r[col] for r in anchors["data"])
    per_block = client.predict("all conditions", "method", True, "one row per block", api_name="/leaderboard")
    assert len(per_block["data"]) == len(app_data.results)
    with pytest.raises(AppError, match="unknown condition 'L9'"):
        client.predict("L9", "CosSim ↑", True, "mean per method and condition", api_name="/leaderboard")

    # An uploaded results.csv replaces the table for this session only.
    mine = app_data.results.copy()
    l1 = mine[mine["method"] == "sanity_world"].assign(method="my_model", condition="L1")
    pd.concat([mine, l1]).to_csv(tmp_path / "results.csv", index=False)
    out = client.predict(_handles([str(tmp_path / "results.csv")])[0], api_name="/upload_results")
    source, condition_update, table, notes, plots, report_md, status = (out[0], out[1], out[5], out[6], out[7],
                                                                         out[8], out[9])
    assert "results.csv (42 rows)" in source and "Loaded 42 result rows" in status
    assert "L1" in [c[1] if isinstance(c, (list, tuple)) else c for c in condition_update["choices"]]
    assert "my_model" in [r[1] for r in table["data"]]
    # the uploaded table carries chance columns; without a run.json its benchmark is unknown
    assert "chance acc" in table["headers"] and "Chance:" in notes and "**unknown**" in source
    assert plots and all(item["caption"] for item in plots) and "Table 10" in report_md
    l1_only = client.predict("L1", "CosSim ↑", True, "mean per method and condition", api_name="/leaderboard")
    assert [r[1] for r in l1_only["data"]] == ["my_model"]

    (tmp_path / "bad.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(AppError, match="no column.* method, condition, block_id"):
        client.predict(_handles([str(tmp_path / "bad.csv")])[0], api_name="/upload_results")
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)) * 20)
    with pytest.raises(AppError, match="binary.csv is not a readable results.csv"):
        client.predict(_handles([str(tmp_path / "binary.csv")])[0], api_name="/upload_results")
    # rows of two encoders are never averaged into one row: refused, naming the file and the encoders (issue 39)
    pd.concat([mine, mine.assign(encoder="clip-vit-b32")]).to_csv(tmp_path / "two_encoders.csv", index=False)
    with pytest.raises(AppError, match=r"two_encoders.csv mixes encoders \(clip-vit-b32, efficientnet-lite0\)"):
        client.predict(_handles([str(tmp_path / "two_encoders.csv")])[0], api_name="/upload_results")

    reset = client.predict(api_name="/reset_results")
    assert len(reset[5]["data"]) == 5 and "Showing the default results again" in reset[9]
    assert client.predict("all conditions", "CosSim ↑", True, "mean per method and condition",
                          api_name="/leaderboard") == default


def _found_in_upload_folder(name: str) -> list:
    from geofidelity_bench.demo_app.uploads import default_upload_root

    return list(default_upload_root().rglob(name))


def test_uploads_stay_while_listed_and_go_when_no_page_lists_them(server, app_data, tmp_path):
    """Issue 40: the uploads a page lists stay (scored again after a refusal, or against another block, without
    uploading them again); the files a page lists no more are deleted, unless another page lists them too; a
    results.csv is deleted once read."""
    import uuid

    from gradio_client import Client

    tag = uuid.uuid4().hex[:12]  # names no other run uses
    me, other = (Client(server, verbose=False, download_files=False, analytics_enabled=False) for _ in range(2))
    photos = _files(tmp_path, _fresh(2, seed=9, prefix=f"kept_{tag}"))
    refused = _files(tmp_path, {f"refused_{tag}.jpg": b"not a picture" * 20})
    with pytest.raises(Exception, match=f"refused_{tag}.jpg is not an image"):
        me.predict("lund_seg2", _handles(photos + refused), api_name="/score")
    assert len(_found_in_upload_folder(f"refused_{tag}*")) == 1  # kept: the page still lists it
    assert len(_found_in_upload_folder(f"kept_{tag}_*")) == 2
    status, *_ = me.predict("lund_seg2", _handles(photos), api_name="/score")  # the refused file removed
    assert "Your uploads stay listed" in status and "Scored **2 images**" in status
    assert _found_in_upload_folder(f"refused_{tag}*") == []  # listed no more: deleted
    assert len(_found_in_upload_folder(f"kept_{tag}_*")) == 2
    again, *_ = me.predict("berlin_am_lustgarten", _handles(photos), api_name="/score")
    assert "Scored **2 images**" in again  # the same uploads against another block
    # another page lists the same files (one path each): they stay while either lists them
    other.predict("lund_seg2", _handles(photos), api_name="/score")
    new = _files(tmp_path, _fresh(2, seed=10, prefix=f"new_{tag}"))
    me.predict("lund_seg2", _handles(new), api_name="/score")
    assert len(_found_in_upload_folder(f"kept_{tag}_*")) == 2  # the other page lists them still
    other.predict("lund_seg2", _handles(new), api_name="/score")
    assert _found_in_upload_folder(f"kept_{tag}_*") == []  # no page lists them: deleted
    app_data.results.to_csv(tmp_path / f"results_{tag}.csv", index=False)
    me.predict(_handles([str(tmp_path / f"results_{tag}.csv")])[0], api_name="/upload_results")
    assert _found_in_upload_folder(f"results_{tag}*") == []


def test_held_uploads_delete_what_no_session_lists(tmp_path):
    from geofidelity_bench.demo_app.uploads import HeldUploads

    root = tmp_path / "uploads"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    one, two = root / "a" / "one.png", root / "b" / "two.png"
    one.write_bytes(b"1")
    two.write_bytes(b"2")
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"x")
    held = HeldUploads(root)
    assert held.hold("s1", [str(one), str(two), str(outside)]) == []
    assert held.held("s1") == {one.resolve(), two.resolve()}  # nothing outside the upload folder is held
    held.hold("s2", [str(two)])
    assert held.hold("s1", [str(one)]) == []  # two is listed by s2 still
    assert two.exists()
    assert held.release("s2") == [two.resolve()] and not two.exists() and not (root / "b").exists()
    assert held.hold("s1", None) == [one.resolve()] and not one.exists()
    assert outside.exists() and held.release("s1") == [] and held.hold(None, [str(outside)]) == []


@pytest.mark.parametrize("cell, message", [
    ("inf", "row 3, column cos_sim: inf is not a finite number"),
    ("1.5", "row 3, column cos_sim: 1.5 is outside [-1, 1]"),
])
def test_an_uploaded_results_table_with_impossible_scores_is_refused(client, app_data, tmp_path, cell, message):
    """Today `inf` ranked first with a blank cell."""
    from gradio_client.exceptions import AppError

    table = app_data.results.copy().astype({"cos_sim": object})
    table.loc[table.index[2], "cos_sim"] = cell
    table.to_csv(tmp_path / "impossible.csv", index=False)
    with pytest.raises(AppError, match=message.replace("[", r"\[").replace("]", r"\]")):
        client.predict(_handles([str(tmp_path / "impossible.csv")])[0], api_name="/upload_results")


def test_results_ranges_come_from_the_catalog(app_data):
    from geofidelity_bench.demo_app.results import ResultsError, check_results

    ok = check_results(app_data.results.assign(cos_sim=1.0 + 1e-15), "edge.csv")  # rounding of identical sets
    assert (ok["cos_sim"] > 1).all()
    for col, value, why in [("retrieval_acc", -0.25, "outside [0, 1]"), ("mrr", 0.0, "outside (0, 1]"),
                            ("mmd", -np.inf, "-inf is not a finite number")]:
        bad = app_data.results.copy()
        bad.loc[bad.index[-1], col] = value
        with pytest.raises(ResultsError, match=rf"row {len(bad)}, column {col}: .*{re.escape(why)}"):
            check_results(bad, "bad.csv")


def test_server_answers_quickly_after_errors(client):
    """A refused request leaves the queue working (bounded concurrency, no stuck worker)."""
    # A stuck worker would never answer: a generous deadline turns that hang into a failure (no speed check).
    update = client.submit("arezzo", api_name="/city_blocks").result(timeout=120)
    assert update["value"] == "arezzo_church_streets"


# -- chance, repeated held-out photos, copied panels, provenance (issue 28 parts 1-3, 7) --------------------


def brute_force_chance(multiplicities) -> tuple[float, float]:
    """Chance (accuracy, MRR) by the metric itself: every order of the distinct candidate blocks, each made the
    similarity order of a generated image, ranked by ``metrics.retrieval`` (its candidate set and tie rule)."""
    from itertools import permutations

    from geofidelity_bench.metrics import CANDIDATE_NAMES, retrieval

    n_blocks = len(multiplicities) + 1
    galleries = np.eye(n_blocks)[:, None, :]  # block j: one photo, the j-th axis
    roles, owner = list(CANDIDATE_NAMES[1:]), []
    candidates = {"target": galleries[0]}
    for j, m in enumerate(multiplicities, start=1):
        for _ in range(m):
            role = roles.pop(0)
            candidates[role] = galleries[j]
            owner.append(j)
    accs, mrrs = [], []
    for order in permutations(range(n_blocks)):
        gen = np.zeros((1, n_blocks))
        gen[0, list(order)] = np.arange(n_blocks, 0, -1)  # the first block of the order is the most similar
        result = retrieval(gen, candidates)
        accs.append(result.accuracy)
        mrrs.append(result.mrr)
    return float(np.mean(accs)), float(np.mean(mrrs))


@pytest.mark.parametrize("multiplicities", [[1], [1, 1], [1, 1, 1, 1], [2, 1, 1], [2, 2], [3, 1], [4], [2, 1]])
def test_chance_levels_follow_the_metrics_candidates_and_tie_rule(multiplicities):
    from geofidelity_bench.metrics import CANDIDATE_NAMES, retrieval_chance

    roles = iter(CANDIDATE_NAMES[1:])
    candidates = {"target": "t"}
    for b, m in enumerate(multiplicities):  # negative block b fills m roles
        candidates.update({next(roles): f"b{b}" for _ in range(m)})
    chance = retrieval_chance(candidates)
    acc, mrr = chance.accuracy, chance.mrr
    assert (acc, mrr) == pytest.approx(brute_force_chance(multiplicities), abs=1e-12)
    if set(multiplicities) == {1}:
        k = len(multiplicities) + 1  # every block in one role: 1/k and the harmonic number H_k / k
        assert (acc, mrr) == pytest.approx((1 / k, sum(1 / r for r in range(1, k + 1)) / k), abs=1e-12)


def _block_chance(bench, block_id):
    """Chance of one block from its negatives, counted by hand, through the brute force above."""
    from collections import Counter

    roles = [neg for neg in bench.negatives(block_id).values() if neg is not None]
    return brute_force_chance(sorted(Counter(roles).values(), reverse=True))


def test_leaderboard_shows_chance_and_marks_repeating_and_copied_rows(app_data):
    from geofidelity_bench.caveats import COPIED_MARK, REPEATS_MARK
    from geofidelity_bench.demo_app import results as lb

    bench = app_data.benchmark
    chance = {b: _block_chance(bench, b) for b in bench.block_ids}
    thin = [b for b in bench.block_ids if len(bench.heldout(b)) < 4]  # cycled to a panel of 4
    assert 0 < len(thin) < len(bench.block_ids)
    table = lb.leaderboard_table(app_data.results, condition="anchor")
    held = table[table["method"] == "Held-out Real"].iloc[0]
    assert held["chance acc"] == pytest.approx(np.mean([chance[b][0] for b in bench.block_ids]), abs=5e-4)
    assert held["chance MRR"] == pytest.approx(np.mean([chance[b][1] for b in bench.block_ids]), abs=5e-4)
    headers = list(table.columns)
    assert headers.index("chance acc") == headers.index("Retrieval accuracy ↑") + 1
    assert headers.index("chance MRR") == headers.index("MRR ↑") + 1
    assert held["notes"] == f"{REPEATS_MARK} ({len(thin)} of {len(bench.block_ids)} blocks)"
    assert set(table.loc[table["method"] != "Held-out Real", "notes"]) == {""}
    per_block = lb.leaderboard_table(app_data.results, view=lb.VIEWS[1])
    for row in per_block.to_dict("records"):
        assert row["chance acc"] == pytest.approx(chance[row["block_id"]][0], abs=5e-4)
        assert row["chance MRR"] == pytest.approx(chance[row["block_id"]][1], abs=5e-4)
        assert (row["notes"] == REPEATS_MARK) == (row["method"] == "Held-out Real" and row["block_id"] in thin)
    notes = lb.leaderboard_notes(app_data.results)
    assert "ties count against the target" in notes and f"{len(thin)} of {len(bench.block_ids)} block(s)" in notes
    assert ", ".join(sorted(thin)) in notes

    # copied panels (the copy audit's n_copied column) are marked, and the note says how many images
    copied = app_data.results.copy()
    copied["n_copied"] = np.where(copied["method"] == "sanity_augmented_heldout", 2.0, np.nan)
    summary = lb.leaderboard_table(copied, condition="sanity").set_index("method")
    assert summary.loc["Sanity: augmented held-out", "notes"] == f"{COPIED_MARK} (7 of 7 blocks)"
    assert summary.loc["Sanity: world photos", "notes"] == ""
    assert "14 image(s) in 7 panel(s)" in lb.leaderboard_notes(copied)


def test_old_results_without_the_new_columns_still_show(app_data):
    from geofidelity_bench.demo_app import results as lb

    old = app_data.results.drop(columns=[c for c in ("n_candidates", "chance_retrieval_acc", "chance_mrr", "n_distinct",
                                                     "n_copied") if c in app_data.results])
    table = lb.leaderboard_table(old)
    assert table["chance acc"].isna().all() and set(table["notes"]) == {""}
    assert "unknown for these results" in lb.leaderboard_notes(lb.annotate_results(old))


def test_score_readings_say_the_chance_level(app_data):
    bench = app_data.benchmark
    scored = app_data.score("lund_seg2", list(_fresh(2, seed=5).values()))
    assert scored.scored
    acc, mrr = _block_chance(bench, "lund_seg2")
    assert scored.chance == pytest.approx((acc, mrr), abs=1e-12)
    readings = scored.readings()
    assert f"1 in {round(1 / acc)} by chance here (5 candidates, 4 distinct blocks" in readings["retrieval_acc"]
    assert f"{mrr:.2f} by chance here" in readings["mrr"]


def test_results_csv_report_names_its_own_benchmark_never_the_apps(app_data, tmp_path, tmp_path_factory):
    """The app started with --results CSV: the report and the page name the results' benchmark (from the
    run.json next to the CSV), or say it is unknown; never the app's own benchmark."""
    import json

    from geofidelity_bench.demo_app import load_app_data
    from geofidelity_bench.demo_app import results as lb

    cache = tmp_path_factory.getbasetemp() / "app-embedding-cache"
    own_fp = app_data.benchmark.fingerprint
    _, own_md = lb.report_images(app_data.results, app_data.run_info)
    assert own_fp[:16] in own_md  # the app's own scores do name the app's benchmark

    folder = tmp_path / "other"
    folder.mkdir()
    new = ("n_candidates", "chance_retrieval_acc", "chance_mrr", "n_distinct", "n_copied")
    app_data.anchor_results.drop(columns=[c for c in new if c in app_data.anchor_results]).to_csv(
        folder / "results.csv", index=False)
    other_fp = "0f" * 32
    (folder / "run.json").write_text(json.dumps({
        "benchmark": {"name": "another_bench", "fingerprint": other_fp},
        "encoder": {"name": "efficientnet-lite0", "config_hash": app_data.own_info["encoder"]["config_hash"]},
        "protocol": {"version": app_data.own_info["protocol"]["version"]}}))
    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache), results_csv=str(folder / "results.csv"))
    _, md = lb.report_images(data.results, data.run_info)
    assert other_fp[:16] in md and own_fp[:16] not in md
    text = lb.provenance_text(data.run_info, data.own_info)
    assert "another_bench" in text and "Not comparable" in text and "another benchmark" in text
    assert data.results["chance_retrieval_acc"].isna().all()  # not taken from the app's benchmark

    (folder / "run.json").unlink()
    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache), results_csv=str(folder / "results.csv"))
    assert data.run_info is None
    _, md = lb.report_images(data.results, data.run_info)
    assert own_fp[:16] not in md
    assert "**unknown**" in lb.provenance_text(data.run_info, data.own_info)

    (folder / "run.json").write_text("{not json")
    with pytest.raises(lb.ResultsError, match="run.json .*cannot be read"):
        load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache), results_csv=str(folder / "results.csv"))


def test_startup_leaderboard_marks_the_sanity_methods_as_copies_like_evaluate(app_data):
    """The app scores its startup panels itself: the sanity methods go through the same copy audit as
    in `evaluate` (both are made of the benchmark's own photos), the anchors are not audited."""
    from geofidelity_bench import near_copies
    from geofidelity_bench.caveats import COPIED_MARK
    from geofidelity_bench.demo_app import results as lb

    res = app_data.results
    assert res.loc[res["condition"] == "anchor", "n_copied"].isna().all()
    sanity = res[res["condition"] == "sanity"]
    assert set(sanity["method"]) == set(near_copies.EXPECTED_COPIES) and (sanity["n_copied"] == 4).all()
    table = lb.leaderboard_table(res).set_index("method")
    n = res["block_id"].nunique()
    for label in ("Sanity: augmented held-out", "Sanity: world photos"):
        assert table.loc[label, "notes"] == f"{COPIED_MARK} ({n} of {n} blocks)"
    assert COPIED_MARK not in table.loc["Held-out Real", "notes"]


def test_copied_rows_never_head_the_app_leaderboard(app_data):
    from geofidelity_bench.caveats import COPIED_MARK
    from geofidelity_bench.demo_app import results as lb

    res = app_data.results
    for sort_by in ("CosSim ↑", "DCSF ↓"):
        table = lb.leaderboard_table(res, sort_by=sort_by)
        copied = table["notes"].str.contains(COPIED_MARK, regex=False).to_numpy()
        assert copied.any() and not copied[0]
        first_copied = int(np.argmax(copied))
        assert copied[first_copied:].all()  # every copied row after every clean one
        clean = table[~copied]
        col = sort_by
        assert list(clean[col]) == sorted(clean[col], reverse=sort_by.endswith("↑"))


# -- issue 31 section 2: the app on a laptop (what the page shows, checked without a browser) ----------------


def test_block_map_labels_stay_inside_the_map(app_data):
    """Every negative's name on the map is drawn inside the axes (none cut at the map's edge), for every block."""
    from geofidelity_bench.demo_app import figures

    bench = app_data.benchmark
    for block in bench.blocks:
        fig = figures.block_map_figure(bench, block.block_id)
        renderer = fig.canvas.get_renderer()
        fig.canvas.draw()
        ax = fig.axes[0]
        box = ax.get_window_extent(renderer)
        names = {t.get_text(): t for t in ax.texts}
        same_city = [n for n in figures.negatives_by_block(bench, block.block_id)
                     if bench.block(n).city == block.city]
        assert sorted(names) == sorted(same_city)
        for name, text in names.items():
            ext = text.get_window_extent(renderer)
            assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1, \
                (block.block_id, name, ext, box)


def test_leaderboard_numbers_have_one_format_and_missing_reads_n_a(app_data):
    """Every score and chance cell of the shown table reads like 0.900 (three decimals) or n/a; the
    value is the table's number, rounded; GAAS (not computed by the demo) reads n/a, never blank."""
    from geofidelity_bench.demo_app import results as lb

    for view in lb.VIEWS:
        numbers = lb.leaderboard_table(app_data.results, view=view)
        shown = lb.display_table(numbers)
        columns = [h for _, h in lb.LEADERBOARD_METRICS] + [h for _, h in lb.CHANCE_COLUMNS.values()]
        for col in columns:
            for value, cell in zip(numbers[col], shown[col]):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    assert cell == "n/a", (col, cell)
                else:
                    assert re.fullmatch(r"-?\d+\.\d{3}", cell), (col, cell)
                    assert abs(float(cell) - float(value)) <= 0.0005 + 1e-12
        assert set(shown["GAAS ↓"]) == {"n/a"}
        assert not shown.isna().any().any()
        # the ranks stay integers; a row that is not ranked (copied) has none
        assert shown["#"].tolist() == ["" if pd.isna(v) else int(v) for v in numbers["#"]]
        assert "" in shown["#"].tolist() and all(isinstance(v, int) for v in shown["#"] if v != "")


def test_per_block_view_ranks_within_each_block(app_data):
    """In "one row per block", # is the rank inside the block (1 for the block's best row), checked against
    an independent ranking of the result rows by CosSim (copied sanity panels after the rest)."""
    from geofidelity_bench.caveats import copied_mask
    from geofidelity_bench.demo_app import results as lb

    res = app_data.results
    table = lb.leaderboard_table(res, view=lb.VIEWS[1], sort_by="CosSim ↑")
    assert len(table) == len(res)
    copied = copied_mask(res)
    for block, rows in res.assign(_copied=copied).groupby("block_id"):
        expected = rows.sort_values(["_copied", "cos_sim"], ascending=[True, False], kind="mergesort")
        got = table[table["block_id"] == block]
        n_ranked = int((~expected["_copied"]).sum())  # the copied rows are not ranked: no rank in "#"
        assert [None if pd.isna(v) else int(v) for v in got["#"]] == (
            list(range(1, n_ranked + 1)) + [None] * (len(rows) - n_ranked))
        assert [round(v, 3) for v in got["CosSim ↑"]] == [round(v, 3) for v in expected["cos_sim"]]
    # the rows of one block are together
    blocks = table["block_id"].tolist()
    assert blocks == sorted(blocks, key=blocks.index) and len({b for b in blocks}) == res["block_id"].nunique()
    runs = [b for i, b in enumerate(blocks) if i == 0 or blocks[i - 1] != b]
    assert len(runs) == res["block_id"].nunique()


def test_submit_text_says_what_the_running_app_has():
    from geofidelity_bench.demo_app.hub_board import submit_markdown

    without = submit_markdown(None, hub_tab=False)
    assert "Hub leaderboard tab" not in without and "--results-repo" in without
    assert "push-results results --repo-id ORG/NAME" in without
    with_board = submit_markdown("me/results", hub_tab=True)
    assert 'Press "Refresh" on the Hub leaderboard tab' in with_board and "`me/results`" in with_board


def test_startup_plots_name_cities_by_their_names(app_data):
    """The app's own run record carries the benchmark's city names, so its heatmap reads "Arezzo
    (3 blocks)" as the report of an `evaluate` folder does, not the key "arezzo"."""
    from geofidelity_bench.report.context import Context

    names = app_data.own_info["benchmark"]["city_names"]
    assert names == {k: c.name for k, c in app_data.benchmark.cities.items()}
    assert any(k != v for k, v in names.items())  # the demo's keys are not its names
    ctx = Context(app_data.results, [app_data.own_info], seed=0, n_resamples=10, rank_resamples=1, confidence=0.95)
    assert ctx.city_names == names


# -- issue 40: the leaderboard on a phone, the Score plot's chance lines -----------------------------------------


def test_leaderboard_cards_show_every_number_and_mark_and_rank_only_ranked_rows(app_data):
    from geofidelity_bench.caveats import COPIED_MARK, REPEATS_MARK
    from geofidelity_bench.demo_app import results as lb

    shown = lb.display_table(lb.leaderboard_table(app_data.results, sort_by="DCSF ↓"))
    html = lb.leaderboard_cards(shown, "DCSF ↓")
    cards = re.split(r'<div class="gfb-card(?: gfb-unranked)?">', html)[1:]
    assert len(cards) == len(shown)
    for card, (_, row) in zip(cards, shown.iterrows()):
        ranked = row["#"] != ""
        assert (f'<span class="gfb-card-rank">#{row["#"]}</span>' in card) == ranked
        assert ("not ranked" in card) != ranked and (COPIED_MARK in card) != ranked
        for header in [h for _, h in lb.LEADERBOARD_METRICS] + [h for _, h in lb.CHANCE_COLUMNS.values()]:
            assert f"<dd>{row[header]}</dd>" in card or f'<dd class="gfb-key">{row[header]}</dd>' in card
        # the score the table is sorted by first, in bold
        assert card.index('<dt class="gfb-key">DCSF ↓</dt>') < card.index("<dt>CosSim ↑</dt>")
    assert REPEATS_MARK in html
    evil = shown.copy()
    evil.loc[0, "method"] = "<script>x</script>"
    assert "<script>" not in lb.leaderboard_cards(evil) and "&lt;script&gt;" in lb.leaderboard_cards(evil)


def test_score_plot_draws_the_chance_level_on_retrieval_and_mrr(app_data):
    from matplotlib.lines import Line2D

    from geofidelity_bench.demo_app import figures
    from geofidelity_bench.demo_app.ui import _anchor_plot

    scored = app_data.score("lund_seg2", list(_fresh(2, seed=7).values()))
    acc, mrr = scored.chance
    for narrow in (False, True):
        fig = _anchor_plot(scored.as_json(), narrow=narrow)
        titles = {ax.get_title(): ax for ax in fig.axes}
        for title, level in (("Retrieval accuracy ↑ (- - chance)", acc), ("MRR ↑ (- - chance)", mrr)):
            dashed = [ln for ln in titles[title].get_lines() if ln.get_linestyle() == "--"]
            assert len(dashed) == 1 and dashed[0].get_color() == figures.CHANCE_COLOR
            assert dashed[0].get_xdata()[0] == pytest.approx(level)
        assert "CosSim ↑" in titles  # no chance line where there is no chance level
        assert not [ln for ln in titles["CosSim ↑"].get_lines() if ln.get_linestyle() == "--"]
        assert fig._suptitle.get_text() == figures.ANCHOR_PLOT_TITLE
        assert isinstance(fig.legends[0].legend_handles[-1], Line2D)
    assert _anchor_plot(app_data.score("lund_seg2", [r.image_bytes for r in app_data.benchmark.heldout("lund_seg2")])
                        .as_json(), narrow=False) is None  # copies only: no plot at all
