"""The ``geofidelity`` evaluate module: loading, parity with evaluate_panels, batching, errors, Space files.

``import evaluate`` takes seconds, so one metric instance is shared by the module
(``metric`` fixture) and the loading checks run in one subprocess.
"""

from __future__ import annotations

import configparser
import importlib.util
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from geofidelity_bench import metric_module
from geofidelity_bench.benchmark import load_benchmark

REPO = Path(__file__).resolve().parents[1]
CANONICAL = Path(metric_module.metric_path()) / "geofidelity.py"
SPACE = REPO / "metric_card" / "geofidelity"
ENCODER = "efficientnet-lite0"
BLOCKS = ("lund_seg1", "lund_seg2")


def _isolated_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp / "hf"),
               HF_MODULES_CACHE=str(tmp / "hf" / "modules"), GEOFIDELITY_CACHE=str(tmp / "embeddings"),
               GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH=str(REPO))
    return env


def _same(a, b, tol=1e-6) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return abs(a - b) <= tol


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("metric_module")


@pytest.fixture(scope="module")
def evaluate_lib(work):
    # evaluate reads HF_MODULES_CACHE once, at import: keep its module copies out of the user's cache.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_MODULES_CACHE", str(work / "modules"))
        import evaluate
    return evaluate


@pytest.fixture(scope="module")
def metric(evaluate_lib, work):
    return evaluate_lib.load(metric_module.metric_path(), cache_dir=str(work / "evaluate"))


@pytest.fixture(scope="module")
def sets_metric(evaluate_lib, work):
    return evaluate_lib.load(metric_module.metric_path(), "sets", cache_dir=str(work / "evaluate"))


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder(ENCODER, device="cpu")


@pytest.fixture(scope="module")
def cache_dir(work, demo_lite0_cache_dir):
    """This module's embedding cache: a copy of the session's (the demo's efficientnet-lite0 embeddings)."""
    import shutil

    return str(shutil.copytree(demo_lite0_cache_dir, work / "embeddings", dirs_exist_ok=True))


@pytest.fixture(scope="module")
def panel_inputs(demo, work):
    """Held-out photos of two demo blocks as a mix of PIL images, file paths and encoded bytes."""
    from PIL import Image

    images, targets = [], []
    for bid in BLOCKS:
        for k, ref in enumerate(demo.heldout(bid)):
            if k % 3 == 0:
                images.append(Image.open(io.BytesIO(ref.image_bytes)))  # a JPEG-format PIL image, no filename
            elif k % 3 == 1:
                path = work / f"{ref.reference_id}.jpg"
                path.write_bytes(ref.image_bytes)
                images.append(str(path))
            else:
                images.append(ref.image_bytes)
            targets.append(bid)
    return images, targets


# -- the module file and how it ships ----------------------------------------------------------------------


def test_space_copy_is_identical_to_the_shipped_module():
    assert CANONICAL.is_file()
    assert (SPACE / "geofidelity.py").read_bytes() == CANONICAL.read_bytes(), (
        "metric_card/geofidelity/geofidelity.py differs from the module shipped in the package; run: "
        "python scripts/sync_published_files.py"
    )


def test_metric_cites_the_paper(metric, sets_metric):
    from geofidelity_bench.citation import CITATION_BIBTEX

    assert metric.citation == sets_metric.citation == CITATION_BIBTEX


def test_module_file_ships_as_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    patterns = cfg["options.package_data"]["geofidelity_bench"].split()
    rel = CANONICAL.relative_to(REPO / "geofidelity_bench").as_posix()
    assert any(Path(rel).match(p) or rel == p for p in patterns), patterns


def test_module_imports_are_one_per_line_and_the_package_is_declared():
    text = CANONICAL.read_text()
    imports = [ln for ln in text.splitlines() if re.match(r"^(import|from)\s", ln)]
    assert imports and not any("," in ln.split("#")[0] for ln in imports if ln.startswith("import "))
    assert any(ln.startswith("import geofidelity_bench") and "# From: git+https://" in ln for ln in imports)


def test_import_geofidelity_bench_does_not_import_evaluate():
    code = (
        "import sys, geofidelity_bench\n"
        "from pathlib import Path\n"
        "assert Path(geofidelity_bench.metric_path(), 'geofidelity.py').is_file()\n"
        "heavy = [m for m in ('evaluate', 'datasets', 'gradio', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def _expected_outputs(block: str) -> list[str]:
    """The trailing ``# ...`` lines of a code block: what its prints show."""
    lines = block.rstrip().splitlines()
    out = []
    while lines and lines[-1].startswith("# "):
        out.insert(0, lines.pop()[2:])
    return out


def test_card_examples_run_from_any_folder_and_bare_name_loads_inside_metric_card(tmp_path, warm_demo_cache):
    """One subprocess: the card's python examples (evaluate.load(metric_path())) from tmp_path,
    then evaluate.load("geofidelity") with metric_card/ as the working directory. The embedding
    cache ($GEOFIDELITY_CACHE) starts with the demo's embeddings, as after a first run."""
    warm_demo_cache.rename(tmp_path / "embeddings")  # _isolated_env's GEOFIDELITY_CACHE
    blocks = _python_blocks((SPACE / "README.md").read_text())
    assert len(blocks) >= 3
    script = "\n".join(blocks) + (
        "\nimport os\n"
        f"os.chdir({str(REPO / 'metric_card')!r})\n"
        "local = evaluate.load('geofidelity', 'sets')\n"
        "emb = np.random.default_rng(1).normal(size=(5, 8)).astype('float32')\n"
        "print('BARE', local.compute(predictions=emb, references=emb[::-1])['mmd'])\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_isolated_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    for block in blocks:
        for line in _expected_outputs(block):
            assert line in run.stdout.splitlines(), (line, run.stdout)
    assert "BARE 0.0" in run.stdout


# -- config "default" -------------------------------------------------------------------------------------


def test_compute_equals_evaluate_panels(metric, demo, encoder, panel_inputs, warm_demo_cache):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import METRIC_COLUMNS, RESULT_COLUMNS, evaluate_panels

    images, targets = panel_inputs
    got = metric.compute(predictions=images, references=targets, encoder=encoder, use_cache=False,
                         method="m", condition="c", return_per_block=True)
    panels = {("m", "c", bid): [im for im, t in zip(images, targets) if t == bid] for bid in BLOCKS}
    # the metric computes every embedding (no cache); evaluate_panels reads the demo's from its cache
    want = evaluate_panels(demo, panels, encoder, cache=EmbeddingCache(warm_demo_cache), progress=False)
    for col in METRIC_COLUMNS:
        values = want[col].to_numpy(dtype=float)
        mean = float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
        assert _same(got[col], mean), (col, got[col], mean)
    assert got["n_blocks"] == 2 and got["n_images"] == len(images)
    assert got["encoder"] == ENCODER and got["encoder_config"] == encoder.config
    assert got["segmenter"] is None and "segmenter" in got["gaas_unavailable_reason"]
    assert math.isnan(got["gaas"]) and got["nan_reasons"]["gaas"] == [got["gaas_unavailable_reason"]]
    assert got["benchmark"] == "demo" and got["input_kind"] == "image"
    rows = got["per_block"]
    assert [r["block_id"] for r in rows] == list(BLOCKS)
    for row, (_, want_row) in zip(rows, want.iterrows()):
        assert list(row) == RESULT_COLUMNS
        for col in RESULT_COLUMNS:
            if col in METRIC_COLUMNS or isinstance(want_row[col], float):  # n_copied is NaN (not audited yet)
                assert _same(row[col], float(want_row[col])), col
            else:
                assert row[col] == want_row[col], col


def test_add_batch_three_times_equals_one_compute(metric, encoder, panel_inputs, cache_dir):
    images, targets = panel_inputs
    kw = dict(encoder=encoder, cache_dir=cache_dir)
    once = metric.compute(predictions=images, references=targets, **kw)
    for a, b in ((0, 3), (3, 5), (5, len(images))):
        metric.add_batch(predictions=images[a:b], references=targets[a:b])
    batched = metric.compute(**kw)
    for prediction, reference in zip(images, targets):
        metric.add(prediction=prediction, reference=reference)
    one_by_one = metric.compute(**kw)
    for key, value in once.items():
        for other in (batched, one_by_one):
            if isinstance(value, float):
                assert _same(value, other[key]), key
            else:
                assert value == other[key], key


def test_embeddings_give_the_same_scores_as_images(metric, encoder, panel_inputs, cache_dir):
    from geofidelity_bench.encoders import embed_images

    images, targets = panel_inputs
    from_images = metric.compute(predictions=images, references=targets, encoder=ENCODER, cache_dir=cache_dir)
    emb = embed_images(encoder, images, progress=False)
    from_rows = metric.compute(predictions=list(emb), references=targets, encoder=encoder, cache_dir=cache_dir)
    from_matrix = metric.compute(predictions=emb, references=targets, encoder=encoder, cache_dir=cache_dir)
    assert from_rows["input_kind"] == from_matrix["input_kind"] == "embedding"
    for key in ("cos_sim", "mmd", "dcsf", "diversity_gap", "retrieval_acc", "mrr", "sim_target", "local_margin"):
        assert _same(from_images[key], from_rows[key]) and _same(from_rows[key], from_matrix[key]), key


@pytest.mark.parametrize(
    "case, match",
    [
        ("unknown_block", r"not in benchmark 'demo': 'nowhere_block'; known block ids: arezzo"),
        ("empty", r"predictions is empty"),
        ("mismatched", r"predictions has 3 item\(s\) but references has 2"),
        ("single_image_panel", r"'lund_seg2' \(1\)"),
        ("mixed_kinds", r"predictions mixes images \(2\) and embeddings \(2\)"),
        ("bad_reference", r"references\[1\] must be the target block id"),
        ("missing_file", r"predictions\[0\]: image file not found"),
        ("bad_prediction", r"predictions\[1\]: expected an image"),
        ("embedding_dim", r"dimension 3, but encoder 'efficientnet-lite0' gives 1280"),
    ],
)
def test_clear_errors(evaluate_lib, metric, encoder, panel_inputs, case, match):
    images, _ = panel_inputs
    emb3 = [[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]
    calls = {
        "unknown_block": dict(predictions=images[:2], references=["nowhere_block"] * 2),
        "empty": dict(predictions=[], references=[]),
        "mismatched": dict(predictions=images[:3], references=["lund_seg1"] * 2),
        "single_image_panel": dict(predictions=images[:3], references=["lund_seg1", "lund_seg1", "lund_seg2"]),
        "mixed_kinds": dict(predictions=images[:2] + [[1.0] * 1280, [2.0] * 1280], references=["lund_seg1"] * 4),
        "bad_reference": dict(predictions=images[:2], references=["lund_seg1", 7]),
        "missing_file": dict(predictions=["/no/such/image.jpg", images[1]], references=["lund_seg1"] * 2),
        "bad_prediction": dict(predictions=[images[0], object()], references=["lund_seg1"] * 2),
        "embedding_dim": dict(predictions=emb3, references=["lund_seg1"] * 2),
    }
    # A fresh in-memory instance: a failing compute leaves nothing behind for the shared one.
    fresh = evaluate_lib.load(metric_module.metric_path(), keep_in_memory=True)
    with pytest.raises(ValueError, match=match):
        fresh.compute(encoder=encoder, use_cache=False, **calls[case])


def test_unknown_config_is_refused(evaluate_lib):
    with pytest.raises(ValueError, match=r"unknown geofidelity config 'nope'.*'default', 'geodiv', 'mfp', 'sets'"):
        evaluate_lib.load(metric_module.metric_path(), "nope")


def test_default_encoder_is_the_reference_one_and_never_switched():
    from geofidelity_bench.encoders import EncoderUnavailableError

    try:
        enc = metric_module.MetricResources().encoder(None)
    except EncoderUnavailableError as err:  # offline without cached weights: say how to run offline
        assert "dinov2-base" in str(err) and "encoder='efficientnet-lite0'" in str(err)
    else:
        assert enc.name == "dinov2-base"


# -- config "sets" -----------------------------------------------------------------------------------------


def test_sets_equals_direct_metric_calls(sets_metric):
    from geofidelity_bench import metrics

    rng = np.random.default_rng(7)
    gen = rng.normal(size=(5, 24)).astype(np.float32)
    ref = (rng.normal(size=(9, 24)) + 0.5).astype(np.float32)
    got = sets_metric.compute(predictions=gen, references=ref)
    assert got["cos_sim"] == pytest.approx(metrics.cos_sim(gen, ref), abs=1e-12)
    assert got["mmd"] == pytest.approx(metrics.mmd2(gen, ref), abs=1e-12)
    assert got["dcsf"] == pytest.approx(metrics.dcsf(gen, ref), abs=1e-12)
    assert got["diversity_gap"] == pytest.approx(metrics.diversity_gap(gen, ref), abs=1e-12)
    assert got["diversity_predictions"] == pytest.approx(metrics.diversity(gen), abs=1e-12)
    assert (got["n_predictions"], got["n_references"], got["encoder"]) == (5, 9, None)
    # add_batch with sets of different sizes per batch
    sets_metric.add_batch(predictions=gen[:2], references=ref[:6])
    sets_metric.add_batch(predictions=gen[2:], references=ref[6:])
    sets_metric.add_batch(predictions=[], references=[])
    batched = sets_metric.compute()
    for key in ("cos_sim", "mmd", "dcsf", "diversity_gap", "n_predictions", "n_references"):
        assert batched[key] == pytest.approx(got[key], abs=1e-12), key


def test_sets_embeds_images_with_the_encoder(sets_metric, demo, encoder, cache_dir):
    from geofidelity_bench import metrics
    from geofidelity_bench.encoders import embed_images

    held = [r.image_bytes for r in demo.heldout("lund_seg1")]
    gallery = [r.image_bytes for r in demo.gallery("lund_seg1")]
    gallery_emb = embed_images(encoder, gallery, progress=False)
    got = sets_metric.compute(predictions=held, references=gallery_emb, encoder=encoder, cache_dir=cache_dir)
    held_emb = embed_images(encoder, held, progress=False)
    assert got["input_kind"] == {"predictions": "image", "references": "embedding"}
    assert got["encoder"] == ENCODER
    assert got["cos_sim"] == pytest.approx(metrics.cos_sim(held_emb, gallery_emb), abs=1e-6)
    assert got["dcsf"] == pytest.approx(metrics.dcsf(held_emb, gallery_emb), abs=1e-6)
    with pytest.raises(ValueError, match=r"references has 1 item"):
        sets_metric.compute(predictions=held_emb, references=held_emb[:1])


# -- the Space ----------------------------------------------------------------------------------------------


def test_space_files():
    import yaml

    readme = (SPACE / "README.md").read_text()
    front = yaml.safe_load(readme.split("---")[1])
    for key in ("title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "app_file", "pinned", "tags",
                "description"):
        assert key in front, key
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py" and front["pinned"] is False
    assert {"evaluate", "metric"} <= set(front["tags"])
    for section in ("## Metric Description", "## How to use", "## Inputs", "## Output Values",
                    "### Values from Popular Papers", "## Examples", "## Limitations and Bias", "## Citation"):
        assert section in readme, section
    assert "0.902" in readme and "0.855" in readme and "GeoFidelity-Bench: Evaluating Block-Conditioned" in readme
    reqs = (SPACE / "requirements.txt").read_text()
    assert "git+https://github.com/YOUR_ORG/geofidelity-bench" in reqs and "evaluate" in reqs


def test_space_app_builds_without_launching_and_scores(evaluate_lib, work, monkeypatch):
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    monkeypatch.setenv("GEOFIDELITY_CACHE", str(work / "embeddings"))
    import gradio as gr

    spec = importlib.util.spec_from_file_location("geofidelity_space_app", SPACE / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    demo = app.build_demo()
    assert isinstance(demo, gr.Blocks)
    assert app.load_metric.cache_info().currsize == 0  # building the UI loads no metric
    table = app.scores_markdown({"cos_sim": 0.5, "gaas": float("nan"), "n_images": 4, "benchmark": "demo",
                                 "encoder": ENCODER, "nan_reasons": {"gaas": ["no segmenter"]}})
    assert "| CosSim | 0.500 |" in table and "| GAAS | n/a |" in table and "no segmenter" in table
    assert "copied" not in table
    copied = app.scores_markdown({"cos_sim": 0.98, "n_images": 4, "n_copied": 1, "near_copies": [
        {"file": "a.jpg", "reference_id": "lund_seg1__03", "reference_block_id": "lund_seg1", "flagged": True}]})
    assert "⚠ copied: 1 of 4 image(s)" in copied and "`a.jpg` = photo `lund_seg1__03` of block lund_seg1" in copied
    with pytest.raises(gr.Error):
        app.score_uploads("lund_seg1", [], ENCODER)
    # The Space's own path: the module file next to app.py, the held-out anchor of a block.
    shown, raw = app.score_heldout("lund_seg1", ENCODER)
    assert raw["n_images"] == 4 and raw["method"] == "heldout_real" and raw["encoder"] == ENCODER
    assert "| Retrieval accuracy |" in shown


# -- config "mfp" --------------------------------------------------------------------------------------------


def test_mfp_config_equals_mfp_compute(evaluate_lib, work, tmp_path):
    import torch
    from PIL import Image, ImageDraw
    from transformers import ViTConfig, ViTModel

    from geofidelity_bench.mfp import mfp_compute

    torch.manual_seed(0)
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8), add_pooling_layer=False).save_pretrained(tmp_path / "vit")
    tiles = []
    for i in range(4):
        img = Image.new("RGB", (48, 48), (240, 238, 230))
        ImageDraw.Draw(img).line([(0, 8 * i), (47, 40 - 6 * i)], fill=(90, 90, 200), width=5)
        tiles.append(img)
    gen, tgt = tiles[:2], [tiles[2], tiles[3]]
    mfp = evaluate_lib.load(metric_module.metric_path(), "mfp", cache_dir=str(work / "evaluate"))
    got = mfp.compute(predictions=gen, references=tgt, model=str(tmp_path / "vit"), image_size=32)
    direct = mfp_compute(gen, tgt, model=str(tmp_path / "vit"), image_size=32)
    for key in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim"):
        assert got[key] == pytest.approx(direct[key], abs=1e-6), key
    assert got["n_pairs"] == 2
    same = mfp.compute(predictions=gen, references=gen, model=str(tmp_path / "vit"), image_size=32)
    assert same["global_score"] == pytest.approx(1.0) and same["spatial_distance"] == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(ValueError, match="predictions has 2 image"):
        mfp.compute(predictions=gen, references=tgt[:1])
    with pytest.raises(ValueError, match="not an image"):
        mfp.compute(predictions=np.zeros((2, 8), np.float32), references=tgt)
    # a pair of different sizes: refused by default, resized and marked when asked, as mfp_compute does
    big = gen[0].resize((64, 64), Image.Resampling.BICUBIC)
    from geofidelity_bench.mfp import PixelSizeError

    with pytest.raises(PixelSizeError):
        mfp.compute(predictions=[big, gen[1]], references=tgt, model=str(tmp_path / "vit"), image_size=32)
    resized = mfp.compute(predictions=[big, gen[1]], references=tgt, model=str(tmp_path / "vit"), image_size=32,
                          resize_pixel_metrics=True)
    direct = mfp_compute([big, gen[1]], tgt, model=str(tmp_path / "vit"), image_size=32, resize_pixel_metrics=True)
    assert list(resized["per_pair"]["pixel_resized"]) == [True, False]
    assert resized["ssim"] == pytest.approx(direct["ssim"], abs=1e-9)


def test_segmenter_gives_gaas_like_evaluate_panels(evaluate_lib, demo, encoder, panel_inputs, tiny_m2f_small_dir,
                                                   warm_demo_cache):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import evaluate_panels
    from geofidelity_bench.segmentation import SegmenterUnavailableError, get_segmenter

    images, targets = panel_inputs
    fresh = evaluate_lib.load(metric_module.metric_path(), keep_in_memory=True)
    got = fresh.compute(predictions=images, references=targets, encoder=encoder, use_cache=False,
                        segmenter="mask2former-vistas", segmenter_weights=str(tiny_m2f_small_dir), return_per_block=True)
    seg = get_segmenter("mask2former-vistas", weights=tiny_m2f_small_dir, device="cpu")
    panels = {}
    for img, block in zip(images, targets):
        panels.setdefault(("submission", "default", block), []).append(img)
    # the embeddings from the demo's cache, the segmentation computed on both sides
    df = evaluate_panels(demo, panels, encoder, segmenter=seg, cache=EmbeddingCache(warm_demo_cache), progress=False)
    assert got["segmenter"] == "mask2former-vistas" and not math.isnan(got["gaas"])
    assert got["gaas"] == pytest.approx(df.gaas.mean(), abs=1e-9)
    with pytest.raises(SegmenterUnavailableError, match="--segmenter-weights PATH"):
        fresh.compute(predictions=images, references=targets, encoder=encoder, use_cache=False,
                      segmenter="mask2former-vistas")


# -- the copy audit, as in `evaluate` (docs/benchmark.md section 5, Copy audit) ----------------------------


def _noise_images(n: int, seed: int) -> list[bytes]:
    """JPEGs of random noise: images of no photo of the benchmark."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, size=(96, 128, 3), dtype=np.uint8)).save(buf, format="JPEG")
        out.append(buf.getvalue())
    return out


@pytest.fixture(scope="module")
def copied_inputs(demo):
    """Exact byte copies of gallery photos interleaved with noise images, the two blocks' items interleaved
    too (input order differs from panel order). Returns (predictions, targets, {index: copied reference_id})."""
    noise = iter(_noise_images(4, seed=7))
    gallery = {bid: demo.gallery(bid) for bid in BLOCKS}
    preds, targets, copied = [], [], {}
    for k in range(4):
        for bid in BLOCKS:
            if k % 2 == 0:
                ref = gallery[bid][k]
                copied[len(preds)] = ref.reference_id
                preds.append(ref.image_bytes)
            else:
                preds.append(next(noise))
            targets.append(bid)
    return preds, targets, copied


def test_copies_of_gallery_photos_are_flagged_per_prediction_and_warned(metric, demo, encoder, copied_inputs,
                                                                        cache_dir):
    from geofidelity_bench.evaluation import evaluate_panels

    preds, targets, copied = copied_inputs
    with pytest.warns(metric_module.CopiedImagesWarning) as caught:
        got = metric.compute(predictions=preds, references=targets, encoder=encoder, cache_dir=cache_dir,
                             return_per_block=True)
    # the audit's own warning, whatever else the interpreter emits meanwhile (a ResourceWarning from another
    # test's garbage, collected during this call, once came first here)
    texts = [str(w.message) for w in caught if issubclass(w.category, metric_module.CopiedImagesWarning)]
    assert len(texts) == 1
    text = texts[0]
    assert f"{len(copied)} submitted image(s) are copies of the benchmark's own photos" in text
    for i, ref_id in copied.items():  # each copy named by its position and the photo it copies
        assert f"predictions[{i}] (submission/default/{targets[i]}) = photo {ref_id} of block {targets[i]}" in text
    assert "exclude_copies=True" in text

    audit = got["copy_audit"]
    assert [r["index"] for r in audit["images"]] == list(range(len(preds)))  # one record per item, input order
    assert [r["block_id"] for r in audit["images"]] == targets
    assert {r["index"] for r in audit["images"] if r["flagged"]} == set(copied)
    for r in audit["images"]:
        if r["index"] in copied:
            assert r["exact"] and r["reference_id"] == copied[r["index"]] and r["hash_distance"] == 0
    assert audit["n_audited"] == len(preds) and audit["n_flagged"] == len(copied) and audit["excluded"] is False
    assert got["n_copied"] == len(copied) and [r["index"] for r in got["near_copies"]] == sorted(copied)
    assert {r["block_id"]: r["n_copied"] for r in got["per_block"]} == {b: 2.0 for b in BLOCKS}

    # the same audit as the command line's evaluate (evaluate_panels, what `evaluate` runs), record for record
    panels = {}
    for i, (img, bid) in enumerate(zip(preds, targets)):
        panels.setdefault(("submission", "default", bid), []).append(img)
    from geofidelity_bench.encoders import EmbeddingCache

    cli = evaluate_panels(demo, panels, encoder, cache=EmbeddingCache(cache_dir), progress=False).attrs["copy_audit"]
    assert {k: v for k, v in cli.items() if k != "images"} == {k: v for k, v in audit.items() if k != "images"}
    by_block = {bid: [r for r in audit["images"] if r["block_id"] == bid] for bid in BLOCKS}
    for bid in BLOCKS:
        want = [r for r in cli["images"] if r["block_id"] == bid]
        assert [{k: v for k, v in r.items() if k not in ("file", "index")} for r in by_block[bid]] == \
               [{k: v for k, v in r.items() if k != "file"} for r in want]


def test_exclude_copies_scores_without_them_and_clean_inputs_do_not_warn(metric, encoder, copied_inputs, cache_dir,
                                                                         recwarn):
    preds, targets, copied = copied_inputs
    clean = [i for i in range(len(preds)) if i not in copied]
    with pytest.warns(metric_module.CopiedImagesWarning, match="left out of the scores"):
        excluded = metric.compute(predictions=preds, references=targets, encoder=encoder, cache_dir=cache_dir,
                                  exclude_copies=True)
    recwarn.clear()
    only_clean = metric.compute(predictions=[preds[i] for i in clean], references=[targets[i] for i in clean],
                                encoder=encoder, cache_dir=cache_dir)
    assert not [w for w in recwarn if issubclass(w.category, metric_module.CopiedImagesWarning)]
    assert only_clean["n_copied"] == 0 and only_clean["near_copies"] == []
    assert not any(r["flagged"] for r in only_clean["copy_audit"]["images"])
    assert excluded["copy_audit"]["excluded"] is True and excluded["n_copied"] == len(copied)
    for key in ("cos_sim", "mmd", "dcsf", "retrieval_acc", "mrr", "sim_target", "local_margin"):
        assert _same(excluded[key], only_clean[key]), key


def test_n_blocks_counts_only_blocks_with_a_score(metric, demo, encoder, cache_dir):
    """A panel left with one image by exclude_copies is a row of NaN scores: it covers no block, so the
    module's n_blocks is the blocks with a finite score, as every other view counts them (issue 39, case 4)."""
    copies = [r.image_bytes for r in demo.gallery(BLOCKS[0])[:3]]
    noise = _noise_images(3, seed=11)
    preds = copies + noise[:1] + noise[1:]
    targets = [BLOCKS[0]] * 4 + [BLOCKS[1]] * 2
    with pytest.warns(metric_module.CopiedImagesWarning):
        got = metric.compute(predictions=preds, references=targets, encoder=encoder, cache_dir=cache_dir,
                             exclude_copies=True, return_per_block=True)
    rows = got["per_block"]
    finite = [r["block_id"] for r in rows
              if any(isinstance(r[c], float) and math.isfinite(r[c]) for c in ("cos_sim", "mmd", "retrieval_acc"))]
    assert len(rows) == 2 and finite == [BLOCKS[1]]  # BLOCKS[0] kept one image: all NaN
    assert got["n_blocks"] == 1
    assert got["cos_sim"] == pytest.approx(next(r["cos_sim"] for r in rows if r["block_id"] == BLOCKS[1]))
