"""Curation filters (docs/benchmark.md section 8, Curation): NOAA sun elevation against published values, the spatial
filter against hand-checked points, tier 1 flags, tier-5 statistics against independent
computations, and tiers 3 and 4 through the real model code paths with tiny random models."""

from __future__ import annotations

import io
import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geofidelity_bench.benchmark import Block
from geofidelity_bench.curation.filters import (
    TIER3_TEXTS,
    FilterThresholds,
    colorfulness,
    distances_to_polyline_m,
    grayscale,
    image_statistics,
    laplacian_variance,
    rank_key,
    select_top,
    spatial_filter,
    tier1_checks,
    tier1_filter,
    tier3_filter,
    tier3_from_probs,
    tier4_filter,
    tier5_checks,
    tier5_filter,
)
from geofidelity_bench.curation.solar import solar_position, sun_elevation_deg, utc_ms

PHOTOS = sorted((Path(__file__).parent / "data" / "photos").glob("lund_*.jpg"))
UTC = timezone.utc

# -- solar position ---------------------------------------------------------------------------

# Published NOAA values. The NOAA Solar Calculator spreadsheet (NOAA_Solar_Calculations_day.xls)
# with its default site (40 N, 105 W, time zone -6), 21 June 2010, 0:06 local time: solar
# elevation -25.2457 (column AE, no refraction), azimuth 345.8691, declination 23.4383,
# equation of time -1.7063 min; the same spreadsheet at 37.4219444 N, 122.0795833 W
# (time zone -8), 21 Sep 2023, 5:33 local: elevation -5.2409 (no refraction), azimuth 85.1264.
# Its 13:00 local row of 21 June 2010 at 40 N 105 W: 73.4385 with refraction (~0.005 degree).
# The NOAA web Solar Position Calculator at 55 N, 10 E: 1 Jul 2002 12:00 UTC zenith 32.59
# (elevation 57.41), 1 Sep 2004 14:00 UTC zenith 56.69 (elevation 33.31) (refraction included,
# < 0.03 degree at these heights).
NOAA_CASES = [
    (40.0, -105.0, datetime(2010, 6, 21, 6, 6, tzinfo=UTC), -25.245718494866),
    (37.4219444444444, -122.079583333333, datetime(2023, 9, 21, 13, 33, tzinfo=UTC), -5.24086479367834),
    (40.0, -105.0, datetime(2010, 6, 21, 19, 0, tzinfo=UTC), 73.4384793439627),
    (55.0, 10.0, datetime(2002, 7, 1, 12, 0, tzinfo=UTC), 90.0 - 32.59),
    (55.0, 10.0, datetime(2004, 9, 1, 14, 0, tzinfo=UTC), 90.0 - 56.69),
]


@pytest.mark.parametrize("lat, lon, when, expected", NOAA_CASES)
def test_sun_elevation_matches_published_noaa_values(lat, lon, when, expected):
    assert solar_position(lat, lon, when)["elevation_deg"] == pytest.approx(expected, abs=0.05)
    ms = int(when.timestamp() * 1000)
    assert sun_elevation_deg(lat, lon, ms) == pytest.approx(expected, abs=0.05)


def test_noaa_spreadsheet_intermediates():
    p = solar_position(40.0, -105.0, datetime(2010, 6, 21, 6, 6, tzinfo=UTC))
    assert p["elevation_deg"] == pytest.approx(-25.245718494866, abs=1e-6)  # spreadsheet, 15 digits
    assert p["azimuth_deg"] == pytest.approx(345.86910228316, abs=1e-6)
    assert p["declination_deg"] == pytest.approx(23.4383121595139, abs=1e-6)
    assert p["equation_of_time_min"] == pytest.approx(-1.70630784072322, abs=1e-6)
    assert p["hour_angle_deg"] == pytest.approx(166.073423039819, abs=1e-6)
    q = solar_position(37.4219444444444, -122.079583333333, datetime(2023, 9, 21, 13, 33, tzinfo=UTC))
    assert q["azimuth_deg"] == pytest.approx(85.1264242410581, abs=1e-6)
    assert q["declination_deg"] == pytest.approx(0.66936449061751, abs=1e-6)


def test_sun_elevation_edge_cases():
    assert sun_elevation_deg(1.0, 2.0, None) is None
    assert sun_elevation_deg(None, 2.0, 0) is None
    with pytest.raises(ValueError, match="aware"):
        solar_position(0.0, 0.0, datetime(2020, 1, 1))
    # a day at the equator on the equinox: the sun culminates near the zenith around 12:00 UTC at lon 0
    peak = max(solar_position(0.0, 0.0, datetime(2024, 3, 20, 11, tzinfo=UTC) + timedelta(minutes=m))["elevation_deg"]
               for m in range(0, 120, 2))
    assert peak > 89.0


# -- spatial filter ---------------------------------------------------------------------------


def _block(polyline) -> Block:
    from geofidelity_bench.geo import arc_midpoint, bbox, polyline_length_m

    return Block("b1", "oakland", "US", "R", "residential", 1, "A Street", "downtown", "residential",
                 polyline_length_m(polyline), tuple(polyline), arc_midpoint(polyline), bbox(polyline))


def test_spatial_distances_against_hand_checked_points():
    import pandas as pd
    from pyproj import Geod

    geod = Geod(ellps="WGS84")
    line = [(37.8060, -122.3030), (37.8060, -122.2990)]  # ~350 m east-west
    mid_lon = -122.3010
    pts = {}
    for dist in (0.0, 20.0, 29.5, 30.5, 40.0):
        lon, lat, _ = geod.fwd(mid_lon, 37.8060, 0.0, dist)  # due north of the line's middle
        pts[f"n{dist:g}"] = (lat, lon)
    lon, lat, _ = geod.fwd(-122.2990, 37.8060, 90.0, 25.0)  # 25 m beyond the east end, on the axis
    pts["beyond_end"] = (lat, lon)
    lon, lat, _ = geod.fwd(-122.3030, 37.8060, 225.0, 35.0)  # 35 m south-west of the west end
    pts["corner"] = (lat, lon)
    d = distances_to_polyline_m(line, [p[0] for p in pts.values()], [p[1] for p in pts.values()],
                                center=(37.8060, -122.3010))
    got = dict(zip(pts, d))
    # the line is a parallel, not a geodesic; a 350 m chord of a parallel bows ~0.001 m: negligible
    for key, expected in (("n0", 0.0), ("n20", 20.0), ("n29.5", 29.5), ("n30.5", 30.5), ("n40", 40.0),
                          ("beyond_end", 25.0), ("corner", 35.0)):
        assert got[key] == pytest.approx(expected, abs=0.05), key
    cands = pd.DataFrame({"block_id": "b1", "image_id": list(pts), "lat": [p[0] for p in pts.values()],
                          "lon": [p[1] for p in pts.values()]})
    cands.loc[len(cands)] = ["b1", "nowhere", np.nan, np.nan]
    out = spatial_filter(cands, {"b1": _block(line)})
    passed = dict(zip(out["image_id"], out["spatial_pass"]))
    assert passed == {"n0": True, "n20": True, "n29.5": True, "n30.5": False, "n40": False, "beyond_end": True,
                      "corner": False, "nowhere": False}
    assert math.isnan(out.loc[out["image_id"] == "nowhere", "distance_m"].item())
    wide = spatial_filter(cands, {"b1": _block(line)}, FilterThresholds(max_distance_m=45))
    assert wide["spatial_pass"].sum() == 7


def test_spatial_far_north_uses_a_local_projection():
    # at 60 N a degree of longitude is half a degree of latitude: 20 m east of a north-south line
    from pyproj import Geod

    lon, lat, _ = Geod(ellps="WGS84").fwd(24.94, 60.17, 90.0, 20.0)
    d = distances_to_polyline_m([(60.16, 24.94), (60.18, 24.94)], [lat], [lon])
    assert d[0] == pytest.approx(20.0, abs=0.05)


# -- tier 1 -----------------------------------------------------------------------------------


def test_tier1_checks():
    noon = utc_ms(2021, 6, 15, 20)  # 13:00 in Oakland (PDT)
    night = utc_ms(2021, 6, 15, 6)  # 23:00 in Oakland
    lat, lon = 37.807, -122.300
    ok = tier1_checks(False, "perspective", noon, lat, lon)
    assert ok["tier1_pass"] and ok["sun_elevation_deg"] > 70
    assert tier1_checks(None, None, noon, lat, lon)["tier1_pass"]  # missing flag and type are not disqualifying
    assert tier1_checks(False, "", noon, lat, lon)["tier1_pass"]
    assert tier1_checks(False, "Flat", noon, lat, lon)["tier1_pass"]
    assert not tier1_checks(True, "perspective", noon, lat, lon)["tier1_pass"]
    fish = tier1_checks(False, "fisheye", noon, lat, lon)
    assert not fish["tier1_pass"] and not fish["camera_ok"]
    assert not tier1_checks(False, "spherical", noon, lat, lon)["tier1_pass"]
    missing = tier1_checks(False, "perspective", None, lat, lon)
    assert not missing["captured_at_ok"] and not missing["tier1_pass"] and math.isnan(missing["sun_elevation_deg"])
    dark = tier1_checks(False, "perspective", night, lat, lon)
    assert dark["sun_elevation_deg"] < 0 and not dark["sun_ok"] and not dark["tier1_pass"]
    # the bound is inclusive: find a time when the sun is just at/above 20 degrees
    t = utc_ms(2021, 6, 15, 14)
    while sun_elevation_deg(lat, lon, t) < 20.0:
        t += 1000
    assert tier1_checks(False, "perspective", t, lat, lon)["sun_ok"]
    assert not tier1_checks(False, "perspective", t - 60_000, lat, lon)["sun_ok"]


def test_tier1_table():
    import pandas as pd

    df = pd.DataFrame({"image_id": ["a", "b"], "is_pano": pd.array([False, None], dtype="boolean"),
                       "camera_type": ["perspective", None], "captured_at": pd.array([utc_ms(2021, 6, 15, 20), None],
                                                                                     dtype="Int64"),
                       "lat": [37.8, 37.8], "lon": [-122.3, -122.3]})
    out = tier1_filter(df)
    assert out["tier1_pass"].tolist() == [True, False]
    assert {"sun_elevation_deg", "not_pano", "camera_ok", "captured_at_ok", "sun_ok"} <= set(out.columns)


# -- tier 5 -----------------------------------------------------------------------------------


def test_laplacian_variance_equals_scipy_laplace():
    from scipy import ndimage

    rng = np.random.default_rng(0)
    for shape in ((7, 9), (32, 48), (2, 2)):
        gray = rng.integers(0, 256, size=shape).astype(np.float64)
        expected = ndimage.laplace(gray, mode="mirror").var()
        assert laplacian_variance(gray) == pytest.approx(expected, rel=1e-12)
    flat = np.full((10, 10), 77.0)
    assert laplacian_variance(flat) == 0.0


def test_colorfulness_by_hand():
    # two pixels, pure red and pure blue:
    #   rg = R - G = [255, 0]           -> mean 127.5, std 127.5
    #   yb = (R + G) / 2 - B = [127.5, -255] -> mean -63.75, std 191.25
    #   C = sqrt(127.5^2 + 191.25^2) + 0.3 sqrt(127.5^2 + 63.75^2)
    rgb = np.array([[[255, 0, 0], [0, 0, 255]]], dtype=np.uint8)
    expected = math.sqrt(127.5**2 + 191.25**2) + 0.3 * math.sqrt(127.5**2 + 63.75**2)
    assert colorfulness(rgb) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(229.8539 + 0.3 * 142.5493, abs=1e-3)  # = 272.6187
    gray = np.full((4, 4, 3), 128, dtype=np.uint8)
    assert colorfulness(gray) == 0.0


def test_image_statistics_on_a_real_photo():
    stats = image_statistics(PHOTOS[0])
    img = Image.open(PHOTOS[0]).convert("RGB")
    rgb = np.asarray(img, dtype=np.float64)
    luma = rgb @ np.array([0.299, 0.587, 0.114])
    assert stats["width"] == img.width and stats["height"] == img.height
    assert stats["aspect"] == pytest.approx(img.width / img.height)
    assert stats["mean_gray"] == pytest.approx(luma.mean(), abs=0.6)  # PIL rounds each pixel
    from scipy import ndimage

    assert stats["laplacian_var"] == pytest.approx(ndimage.laplace(grayscale(np.asarray(img)), mode="mirror").var())
    flags = tier5_checks(stats)
    assert flags["tier5_pass"], stats  # a real, sharp, daylight street photo


def _jpeg(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_tier5_flags_and_bounds():
    rng = np.random.default_rng(1)
    noisy = rng.integers(60, 200, size=(40, 60, 3), dtype=np.uint8)
    dark = (noisy // 8).astype(np.uint8)
    flat = np.full((40, 60, 3), 120, dtype=np.uint8)
    wide = rng.integers(60, 200, size=(40, 100, 3), dtype=np.uint8)  # aspect 2.5
    edge = rng.integers(60, 200, size=(40, 88, 3), dtype=np.uint8)  # aspect 2.2 exactly: inclusive
    table = tier5_filter(["noisy", "dark", "flat", "wide", "edge"], [_jpeg(a) for a in (noisy, dark, flat, wide, edge)])
    flags = table.set_index("image_id")
    assert flags.loc["noisy", "tier5_pass"]
    assert not flags.loc["dark", "exposure_ok"] and not flags.loc["dark", "tier5_pass"]
    assert not flags.loc["flat", "sharp_ok"] and not flags.loc["flat", "color_ok"]
    assert not flags.loc["wide", "aspect_ok"] and flags.loc["edge", "aspect_ok"]
    retuned = tier5_checks(flags.loc["flat"].to_dict(), FilterThresholds(min_laplacian_var=0, min_colorfulness=0))
    assert retuned["tier5_pass"]  # thresholds re-applied to the table, no image needed


# -- selection order ----------------------------------------------------------------------------


def test_rank_and_select_top():
    rows = [
        {"image_id": "a", "urbanness": 0.2, "quality_score": 0.5, "sun_elevation_deg": 30},
        {"image_id": "b", "urbanness": 0.4, "quality_score": None, "sun_elevation_deg": 30},
        {"image_id": "c", "urbanness": 0.2, "quality_score": 0.9, "sun_elevation_deg": 25},
        {"image_id": "d", "urbanness": float("nan"), "quality_score": 1.0, "sun_elevation_deg": 60},
        {"image_id": "e", "urbanness": 0.2, "quality_score": 0.9, "sun_elevation_deg": 50},
        {"image_id": "f", "urbanness": 0.2, "quality_score": 0.9, "sun_elevation_deg": 50},
    ]
    assert [r["image_id"] for r in select_top(rows, 10)] == ["b", "e", "f", "c", "a", "d"]
    assert [r["image_id"] for r in select_top(rows, 2)] == ["b", "e"]
    assert rank_key(None, None, None, "z") > rank_key(0.0, None, None, "a")


# -- tiers 3 and 4: real code paths, tiny random models -----------------------------------------


def _tiny_tokenizer(tmp: Path):
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = sorted(set(bytes_to_unicode().values()))
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for c in chars:
        vocab.setdefault(c + "</w>", len(vocab))
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.json").write_text(json.dumps(vocab))
    (tmp / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer.from_pretrained(tmp)


@pytest.fixture(scope="session")
def tiny_siglip_curation_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import SiglipConfig, SiglipModel

    root = tmp_path_factory.mktemp("tiny-siglip-curation")
    tok = _tiny_tokenizer(root / "tok")
    torch.manual_seed(3)
    tower = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    cfg = SiglipConfig(
        text_config=dict(tower, vocab_size=len(tok), max_position_embeddings=96, pad_token_id=1, eos_token_id=1,
                         bos_token_id=0),
        vision_config=dict(tower, image_size=32, patch_size=8),
    )
    model = SiglipModel(cfg).eval()
    with torch.no_grad():
        model.logit_scale.fill_(2.0)
        model.logit_bias.fill_(-1.0)
    path = root / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_tier3_texts_are_the_spec_target_and_eight_distractors():
    assert len(TIER3_TEXTS) == 9 and len({k for k, _ in TIER3_TEXTS}) == 9
    assert TIER3_TEXTS[0] == ("target", "a daytime urban street scene with buildings and sidewalks")
    joined = " | ".join(t for _, t in TIER3_TEXTS[1:])
    for words in ("highway", "night", "tunnel", "parking garage", "rural", "truck or a bus", "blurry", "indoor", "sign"):
        assert words in joined


def test_tier3_rule_on_probabilities():
    probs = np.array([
        [0.40, 0.10, 0.10, 0.10, 0.10, 0.05, 0.05, 0.05, 0.05],  # top and >= 0.35: pass
        [0.35, 0.30, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05],  # exactly 0.35: pass
        [0.30, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.05, 0.05],  # top but < 0.35: fail
        [0.36, 0.37, 0.03, 0.04, 0.05, 0.05, 0.05, 0.05, 0.00],  # not top: fail
    ])
    t = tier3_from_probs(["a", "b", "c", "d"], probs)
    assert t["tier3_pass"].tolist() == [True, True, False, False]
    assert t["top_text"].tolist() == ["target", "target", "target", "highway"]
    assert t["p_target"].tolist() == pytest.approx([0.40, 0.35, 0.30, 0.36])


def test_tier3_with_a_tiny_siglip_through_the_encoder(tiny_siglip_curation_dir, tmp_path):
    from geofidelity_bench.encoders import EmbeddingCache, get_encoder

    enc = get_encoder("siglip-so400m", weights=tiny_siglip_curation_dir, device="cpu")
    ids = [p.stem for p in PHOTOS]
    cache = EmbeddingCache(tmp_path / "cache")
    table = tier3_filter(enc, ids, [str(p) for p in PHOTOS], cache=cache, progress=False)
    expected = enc.zero_shot_probs([str(p) for p in PHOTOS], [t for _, t in TIER3_TEXTS])
    got = table[[f"p_{k}" for k, _ in TIER3_TEXTS]].to_numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    rule = (got.argmax(axis=1) == 0) & (got[:, 0] >= 0.35)
    assert table["tier3_pass"].tolist() == rule.tolist()
    again = tier3_filter(enc, ids, [str(p) for p in PHOTOS], cache=cache, progress=False)  # from the cache
    np.testing.assert_allclose(again[[f"p_{k}" for k, _ in TIER3_TEXTS]].to_numpy(), got, atol=1e-6)


def test_tier4_with_the_tiny_mask2former(tiny_m2f_dir):
    from geofidelity_bench.curation.filters import tier4_gate
    from geofidelity_bench.segmentation import GROUP_NAMES, get_segmenter, segment_images

    seg = get_segmenter("mask2former-vistas", weights=tiny_m2f_dir, device="cpu", input_size=64, max_input_size=128)
    ids = [p.stem for p in PHOTOS]
    table = tier4_filter(seg, ids, [str(p) for p in PHOTOS], progress=False)
    shares = segment_images(seg, [str(p) for p in PHOTOS], progress=False)
    np.testing.assert_allclose(table[[f"share_{g}" for g in GROUP_NAMES]].to_numpy(), shares, atol=1e-6)
    for row, s in zip(table.itertuples(), shares):
        passed, measured = tier4_gate(s)
        assert row.tier4_pass == passed
        assert row.urbanness == pytest.approx(measured["urbanness"])
        assert row.tier4_failed == ",".join(measured["failed"])
