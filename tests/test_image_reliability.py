"""Images: bit depths scaled by their range, animated files named, every undecodable file of a run
reported at once (before any model work), and --skip-bad-images."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.images import ImageDecodeError, load_image


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


def _png(arr: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    (Image.fromarray(arr, mode=mode) if mode else Image.fromarray(arr)).save(buf, format="PNG" if mode != "F" else "TIFF")
    return buf.getvalue()


# -- bit depths -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 255, 256, 1000, 32768, 65535])
def test_uniform_16_bit_png_is_scaled_by_bit_depth(value):
    data = _png(np.full((6, 5), value, np.uint16))
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    got = np.asarray(load_image(data, name="dark.png"))
    assert got.shape == (6, 5, 3) and (got == round(value * 255 / 65535)).all()


def test_16_bit_gradient_and_32_bit_integer_images():
    ramp = np.arange(0, 65536, 257, dtype=np.uint16).reshape(16, 16)  # 0, 257, ..., 65535
    got = np.asarray(load_image(_png(ramp), name="ramp.png"))[..., 0]
    np.testing.assert_array_equal(got, np.arange(256, dtype=np.uint8).reshape(16, 16))
    as_i = Image.fromarray(ramp.astype(np.int32), mode="I")
    np.testing.assert_array_equal(np.asarray(load_image(as_i, name="i.tif"))[..., 0], got)
    wide = Image.fromarray(np.full((4, 4), 70000, np.int32), mode="I")
    with pytest.raises(ImageDecodeError, match=r"wide.tif .*outside the 16-bit range"):
        load_image(wide, name="wide.tif")


def test_float_images_use_the_range_0_to_1_or_are_refused_by_name():
    half = Image.fromarray(np.full((4, 4), 0.5, np.float32), mode="F")
    assert (np.asarray(load_image(half, name="half.tif")) == 128).all()
    ones = Image.fromarray(np.ones((4, 4), np.float32), mode="F")
    assert (np.asarray(load_image(ones, name="ones.tif")) == 255).all()
    hot = Image.fromarray(np.full((4, 4), 3.0, np.float32), mode="F")
    with pytest.raises(ImageDecodeError, match=r"hot.tif is a floating-point image with values outside 0..1"):
        load_image(hot, name="hot.tif")


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "CMYK", "1"])
def test_8_bit_images_decode_as_before(mode):
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)).convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="TIFF" if mode == "CMYK" else "PNG")
    np.testing.assert_array_equal(np.asarray(load_image(buf.getvalue(), name="x")), np.asarray(img.convert("RGB")))


# -- animated files ---------------------------------------------------------------------------------------------


def _animated(fmt: str) -> bytes:
    frames = [Image.new("RGB", (32, 24), c) for c in ((200, 30, 30), (30, 200, 30), (30, 30, 200))]
    buf = io.BytesIO()
    frames[0].save(buf, format=fmt, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["GIF", "PNG", "WEBP"])
def test_animated_images_use_the_first_frame_and_are_counted(fmt):
    from geofidelity_bench.images import check_image

    data = _animated(fmt)
    first = np.asarray(load_image(data, name="anim")).astype(int)
    assert abs(first[..., 0].mean() - 200) < 12 and abs(first[..., 2].mean() - 30) < 12
    assert check_image(data, name="anim").frames == 3
    assert check_image(_png(np.zeros((3, 3), np.uint8)), name="still").frames == 1


# -- every undecodable image, before any model work -------------------------------------------------------------


def _write(root, method, block_id, images: dict[str, bytes]):
    folder = root / method / "L0" / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in images.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture
def bad_folder(demo, tmp_path):
    """Four panels with one bad file each: two keep 3 good images, one keeps 1, one keeps 2 of 3."""
    w = [x.image_bytes for x in demo.world]
    jpg = w[0]
    gen = tmp_path / "gen"
    bad = [
        _write(gen, "m", "lund_seg1", {"00.jpg": w[0], "01.jpg": w[1], "02.jpg": w[2], "03.jpg": b"text"}) / "03.jpg",
        _write(gen, "m", "lund_seg2", {"00.jpg": w[3], "01.jpg": w[4], "02.jpg": w[5], "03.jpg": b""}) / "03.jpg",
        _write(gen, "m", "lund_seg3", {"00.jpg": w[6], "01.jpg": jpg[: len(jpg) // 2]}) / "01.jpg",
        _write(gen, "n", "lund_seg1", {"00.png": _png(np.zeros((8, 8), np.uint8))[:40], "01.jpg": w[7], "02.jpg": w[8]}) / "00.png",
    ]
    return gen, bad


def test_evaluate_lists_every_bad_image_before_loading_a_model(bad_folder, tmp_path, capsys):
    gen, bad = bad_folder
    # dinov2-base is not available offline: were it loaded first, that would be the error.
    code = main(["evaluate", "--generated", str(gen), "--encoder", "dinov2-base", "--out", str(tmp_path / "out"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "4 generated image(s) cannot be decoded" in err and "--skip-bad-images" in err
    for path in bad:
        assert str(path) in err
    assert "dinov2" not in err
    assert not (tmp_path / "out").exists()


def test_the_list_of_bad_images_is_capped_at_50_with_a_count():
    from geofidelity_bench.panel_images import BadImagesError, check_panel_images

    panels = {("m", "L0", "lund_seg1"): [b"not an image %d" % i for i in range(57)]}
    with pytest.raises(BadImagesError) as info:
        check_panel_images(panels)
    msg = str(info.value)
    assert msg.count("cannot decode image panel m/L0/lund_seg1 image") == 50
    assert "image 49:" in msg and "image 50:" not in msg and "... and 7 more" in msg


def test_skip_bad_images_scores_the_rest_and_records_every_skipped_file(demo, bad_folder, tmp_path, capsys,
                                                                      warm_demo_cache):
    from geofidelity_bench.encoders import EmbeddingCache, get_encoder
    from geofidelity_bench.evaluation import evaluate_panels

    gen, bad = bad_folder
    out = tmp_path / "out"
    assert main(["evaluate", "--generated", str(gen), "--encoder", "efficientnet-lite0", "--out", str(out),
                 "--cache-dir", str(warm_demo_cache), "--no-progress", "--no-anchors", "--no-gaas",
                 "--skip-bad-images"]) == 0
    df = pd.read_csv(out / "results.csv", keep_default_na=False, na_values=[""])
    run = json.loads((out / "run.json").read_text())
    assert sorted((r["file"], bool(r["reason"])) for r in run["skipped_images"]) == sorted((str(p), True) for p in bad)
    assert all(r["file"] in r["reason"] for r in run["skipped_images"])
    rows = df.set_index(["method", "block_id"])
    assert rows.loc[("m", "lund_seg1"), "n_generated"] == 3 and rows.loc[("m", "lund_seg2"), "n_generated"] == 3
    assert rows.loc[("n", "lund_seg1"), "n_generated"] == 2
    # The panel left with 1 image is NaN everywhere, with the reason.
    small = rows.loc[("m", "lund_seg3")]
    assert small["n_generated"] == 1 and all(math.isnan(small[c]) for c in ("cos_sim", "mmd", "retrieval_acc"))
    reasons = [r for r in run["nan_reasons"] if "m/L0/lund_seg3" in json.dumps(r)]
    assert {r["column"] for r in reasons} >= {"cos_sim", "mmd", "retrieval_acc", "mrr"}
    assert all("--skip-bad-images" in r["reason"] for r in reasons)
    # The scored panels equal an evaluation of their good files alone.
    enc = get_encoder("efficientnet-lite0", device="cpu")
    good = {("m", "L0", "lund_seg1"): sorted((gen / "m" / "L0" / "lund_seg1").glob("0[012].jpg"))}
    want = evaluate_panels(demo, good, enc, cache=EmbeddingCache(warm_demo_cache), progress=False)
    for col in ("cos_sim", "mmd", "diversity_gap", "retrieval_acc", "mrr", "sim_target"):
        assert rows.loc[("m", "lund_seg1"), col] == pytest.approx(want[col].iloc[0], rel=1e-12, abs=1e-12)


def test_evaluate_records_animated_files_in_run_json(demo, tmp_path, warm_demo_cache):
    gen = tmp_path / "gen"
    w = [x.image_bytes for x in demo.world]
    folder = _write(gen, "m", "lund_seg1", {"00.jpg": w[0], "01.png": _animated("PNG"), "02.webp": _animated("WEBP")})
    out = tmp_path / "out"
    assert main(["evaluate", "--generated", str(gen), "--encoder", "efficientnet-lite0", "--out", str(out),
                 "--cache-dir", str(warm_demo_cache), "--no-progress", "--no-anchors", "--no-gaas"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert sorted((r["file"], r["frames"], r["used"]) for r in run["animated_images"]) == [
        (str(folder / "01.png"), 3, "first frame"), (str(folder / "02.webp"), 3, "first frame")]
    assert run["skipped_images"] == []


# -- the app ----------------------------------------------------------------------------------------------------


def test_the_app_lists_every_bad_upload_at_once(tmp_path, demo):
    from geofidelity_bench.demo_app import UploadError, read_uploaded_images

    files = {"good1.jpg": demo.world[0].image_bytes, "fake.jpg": b"just text " * 10, "empty.png": b"",
             "half.jpg": demo.world[1].image_bytes[:300], "anim.gif": _animated("GIF")}
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    with pytest.raises(UploadError) as info:
        read_uploaded_images(paths, upload_root=tmp_path)
    msg = str(info.value)
    assert "3 of the 5 files cannot be used" in msg
    assert "fake.jpg is not an image" in msg and "empty.png is empty" in msg and "half.jpg is not an image" in msg
    ok = read_uploaded_images([paths[0], paths[4]], upload_root=tmp_path)
    assert [u.frames for u in ok] == [1, 3]
