"""Tests of geofidelity_bench.clip_alignment: texts and donors, per-panel scores (a stand-in
encoder with known embeddings, and a tiny random transformers CLIPModel end to end), and the
statistics against scipy / brute force."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import re
import warnings
import zlib

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats as sstats

from geofidelity_bench import clip_alignment as ca
from geofidelity_bench.benchmark import Benchmark, Block, City, ReferenceImage
from geofidelity_bench.prompts import build_prompt, select_donor, text_l1

LONG_STREET = " ".join(f"Word{i}" for i in range(90))


def _jpeg(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), color).save(buf, format="JPEG")
    return buf.getvalue()


def _block(block_id, city, country, street, hood, lat, stratum="major"):
    return Block(block_id, city, country, "R", stratum, 1, street, hood, "primary", 600.0,
                 ((lat, 10.0), (lat + 0.001, 10.0)), (lat, 10.0), (lat, 10.0, lat + 0.001, 10.0))


def make_benchmark(long_name: bool = False) -> Benchmark:
    blocks = [
        _block("alpha_1", "alpha", "AA", "First Street", "Oldtown", 1.0),
        _block("alpha_2", "alpha", "AA", "Second Street", "Newtown", 1.01),
        _block("alpha_3", "alpha", "AA", LONG_STREET if long_name else "Third Street", "Oldtown", 1.02, "residential"),
        _block("beta_1", "beta", "BB", "Main Road", "Harbor", 2.0),
        _block("beta_2", "beta", "BB", "Hill Road", "Uptown", 2.01),
        _block("gamma_1", "gamma", "CC", None, None, 3.0),
    ]
    refs = []
    for i, b in enumerate(blocks):
        for k in range(3):
            refs.append(ReferenceImage(f"{b.block_id}_r{k}", f"img{i}_{k}", b.block_id, None, None, None, None, None,
                                       None, None, None, "CC-BY-SA", None, _jpeg((40 * i % 255, 30 * k, 90))))
    cities = [City("alpha", "Alpha City", "AA", None, "R"), City("beta", "Beta", "BB", None, "R")]
    return Benchmark(blocks, refs, cities=cities, name="synthetic")


def _vec(key: str, dim: int = 8) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return np.random.default_rng(seed).normal(size=dim)


class StubClip:
    """Known embeddings: text -> hash-seeded vector; warns past 77 'tokens' like a CLIP encoder."""

    name = "stub-clip"

    def __init__(self):
        self.text_calls = 0

    def embed_text(self, texts):
        self.text_calls += 1
        for t in texts:
            if len(t.split()) > ca.CLIP_TOKEN_LIMIT:
                warnings.warn(f"text exceeds {ca.CLIP_TOKEN_LIMIT} CLIP tokens and is truncated: {t[:30]!r}",
                              UserWarning)
        return np.stack([_vec("text:" + t) * (1 + len(t) % 3) for t in texts])  # raw, not normalized

    def embed(self, images, batch_size=32):
        raise AssertionError("image embeddings are given; embed must not be called")


def _unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# -- texts ----------------------------------------------------------------------------------


def test_panel_texts_l1_location_and_donors():
    bench = make_benchmark()
    t = ca.panel_texts(bench, "alpha_1", "L1")
    assert t["clip_prompt"] == build_prompt(bench, "alpha_1", "L1").text
    assert t["clip_location"] == "A photo of First Street in the Oldtown district of Alpha City, AA."
    street_donor, scope = select_donor(bench.block("alpha_1"), bench.blocks, "street_name")
    hood_donor, _ = select_donor(bench.block("alpha_1"), bench.blocks, "neighborhood")
    assert (t["street_donor"], t["street_donor_scope"], t["neighborhood_donor"]) == (street_donor, scope, hood_donor)
    street, hood = bench.block(street_donor).street_name, bench.block(hood_donor).neighborhood
    assert street != "First Street" and hood != "Oldtown"
    assert t["clip_location_wrong_street"] == f"A photo of {street} in the Oldtown district of Alpha City, AA."
    shuffled = f"A photo of First Street in the {hood} district of Alpha City, AA."
    assert t["clip_location_shuffled_neighborhood"] == shuffled
    assert t["clip_location_wrong_both"] == f"A photo of {street} in the {hood} district of Alpha City, AA."
    # the altered L1 prompts are exactly the control prompts of this block
    assert t["clip_prompt_wrong_street"] == build_prompt(bench, "alpha_1", "C_WRONG_STREET").text
    assert t["clip_prompt_shuffled_neighborhood"] == build_prompt(bench, "alpha_1", "C_SHUFFLED_NEIGHBORHOOD").text
    assert t["clip_prompt_wrong_both"] == build_prompt(bench, "alpha_1", "C_WRONG_STREET_NEIGHBORHOOD").text


def test_panel_texts_l2_keeps_gps_and_l0_has_no_altered_prompt():
    bench = make_benchmark()
    t2 = ca.panel_texts(bench, "beta_1", "L2")
    donor = bench.block(t2["street_donor"]).street_name
    assert t2["clip_prompt_wrong_street"] == text_l1(donor, "Harbor", "Beta", "BB", gps=(2.0, 10.0))
    assert "near GPS coordinates (2.0000, 10.0000)" in t2["clip_prompt_wrong_street"]
    t0 = ca.panel_texts(bench, "beta_1", "L0")
    assert t0["clip_prompt"] == build_prompt(bench, "beta_1", "L0").text
    assert t0["clip_prompt_wrong_street"] is None and t0["clip_location_wrong_street"] is not None
    assert "no altered prompts" in t0["note"]


def test_panel_texts_never_invent_names():
    bench = make_benchmark()
    t = ca.panel_texts(bench, "gamma_1", "L0")
    assert t["clip_prompt"] is not None
    assert all(t[c] is None for c in ca.SCORE_COLUMNS if c != "clip_prompt")
    assert "no street_name" in t["note"]
    with pytest.raises(ValueError, match="anchor"):
        ca.panel_texts(bench, "alpha_1", "anchor")


# -- scores ---------------------------------------------------------------------------------


def test_score_panels_equals_manual_cosines():
    bench = make_benchmark()
    panels = [("m1", "L1", "alpha_1"), ("m2", "L1", "alpha_1"), ("m1", "L0", "gamma_1"), ("m1", "L1", "alpha_1")]
    embs = {p: np.stack([_vec(f"img:{p}:{k}") for k in range(4)]) for p in panels}
    enc = StubClip()
    out = ca.score_panels(enc, bench, panels, image_embeddings=embs)
    assert len(out) == 3 and enc.text_calls == 1  # duplicate panel scored once, texts embedded in one call
    for key in [("m1", "L1", "alpha_1"), ("m1", "L0", "gamma_1")]:
        row = out[(out["method"] == key[0]) & (out["condition"] == key[1]) & (out["block_id"] == key[2])].iloc[0]
        texts = ca.panel_texts(bench, key[2], key[1])
        img = _unit(embs[key])
        for col in ca.SCORE_COLUMNS:
            if texts[col] is None:
                assert math.isnan(row[col])
            else:
                txt = _unit(enc.embed_text([texts[col]])[0])
                assert row[col] == pytest.approx(float(np.mean(img @ txt)), abs=1e-12)
        assert row["n_images"] == 4 and row["clip_encoder"] == "stub-clip"
    assert out.loc[out["block_id"] == "gamma_1", "city"].iloc[0] == "gamma"


def test_score_panels_passes_token_warnings_through():
    bench = make_benchmark(long_name=True)
    panels = [("m1", "L1", "alpha_3")]
    embs = {panels[0]: np.stack([_vec(f"img{k}") for k in range(2)])}
    with pytest.warns(UserWarning, match="77 CLIP tokens"):
        ca.score_panels(StubClip(), bench, panels, image_embeddings=embs)


def test_score_panels_input_errors():
    bench = make_benchmark()
    with pytest.raises(ValueError, match="images"):
        ca.score_panels(StubClip(), bench, [("m", "L1", "alpha_1")])
    with pytest.raises(ValueError, match="no panels"):
        ca.score_panels(StubClip(), bench, [], image_embeddings={})


# -- a tiny random transformers CLIPModel, end to end ---------------------------------------


class TinyClip:
    """A randomly initialized transformers CLIPModel behind the encoder interface.

    Tokenization hashes lowercase words into the vocabulary (no tokenizer files offline);
    texts longer than 77 tokens warn and are truncated, as the real CLIP encoder does.
    """

    name = "tiny-clip"

    def __init__(self):
        import torch
        from transformers import CLIPConfig, CLIPModel

        self.torch = torch
        torch.manual_seed(0)
        self.vocab = 512
        cfg = CLIPConfig(
            text_config=dict(vocab_size=self.vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=77, bos_token_id=510,
                             eos_token_id=511, pad_token_id=0),
            vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4),
            projection_dim=16,
        )
        self.model = CLIPModel(cfg).eval()

    def _features(self, out):
        return out if self.torch.is_tensor(out) else out.pooler_output

    def embed_text(self, texts):
        rows = []
        for t in texts:
            ids = [510] + [1 + zlib.crc32(w.encode()) % (self.vocab - 3) for w in re.findall(r"\w+|[^\w\s]", t.lower())]
            ids.append(511)
            if len(ids) > ca.CLIP_TOKEN_LIMIT:
                warnings.warn(f"text of {len(ids)} tokens exceeds {ca.CLIP_TOKEN_LIMIT} CLIP tokens; truncated")
                ids = ids[: ca.CLIP_TOKEN_LIMIT - 1] + [511]
            rows.append(ids)
        width = max(map(len, rows))
        ids = self.torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = (ids != 0).long()
        with self.torch.no_grad():
            out = self._features(self.model.get_text_features(input_ids=ids, attention_mask=mask))
        return out.numpy().astype(np.float32)

    def embed(self, images, batch_size=32):
        arrays = []
        for img in images:
            im = Image.open(img).convert("RGB").resize((32, 32), Image.BICUBIC)
            arrays.append((np.asarray(im, dtype=np.float32) / 255.0 - 0.5).transpose(2, 0, 1))
        with self.torch.no_grad():
            out = self._features(self.model.get_image_features(pixel_values=self.torch.from_numpy(np.stack(arrays))))
        return out.numpy().astype(np.float32)


@pytest.fixture(scope="module")
def tiny_clip():
    pytest.importorskip("transformers")
    return TinyClip()


def _write_generated(root, bench, methods, condition="L1"):
    rng = np.random.default_rng(0)
    for m in methods:
        for b in bench.blocks:
            if not b.street_name:
                continue
            folder = root / m / condition / b.block_id
            folder.mkdir(parents=True)
            for k in range(4):
                arr = rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)
                Image.fromarray(arr).save(folder / f"{k:02d}.jpg", quality=95)


def _results_rows(bench, methods, condition="L1", seed=1):
    rng = np.random.default_rng(seed)
    rows = []
    for m in methods:
        for b in bench.blocks:
            if not b.street_name:
                continue
            rows.append({"method": m, "condition": condition, "block_id": b.block_id, "city": b.city,
                         "country": b.country, "stratum": b.stratum, "n_generated": 4, "n_reference": 3,
                         "cos_sim": rng.uniform(0.3, 0.7), "mmd": rng.uniform(0, 0.5), "dcsf": rng.uniform(0, 0.6),
                         "diversity_gap": 0.0, "gaas": np.nan, "retrieval_acc": rng.choice([0.0, 0.25, 1.0]),
                         "mrr": rng.uniform(0.2, 1), "sim_target": 0.5, "sim_same_neighborhood": 0.4,
                         "sim_same_city": 0.4, "sim_same_driving_side": 0.2, "sim_random_city": 0.1,
                         "local_margin": rng.normal(0, 0.05), "strongest_margin": rng.normal(0, 0.05),
                         "encoder": "dinov2-base"})
    return pd.DataFrame(rows)


def test_tiny_clip_model_end_to_end(tmp_path, tiny_clip):
    bench = make_benchmark()
    methods = ["m1", "m2"]
    _write_generated(tmp_path / "gen", bench, methods)
    panels = [(m, "L1", b.block_id) for m in methods for b in bench.blocks if b.street_name]
    out = ca.score_panels(tiny_clip, bench, panels, tmp_path / "gen")
    assert len(out) == len(panels)
    vals = out[list(ca.SCORE_COLUMNS)].to_numpy(dtype=float)
    assert np.isfinite(vals).all() and (np.abs(vals) <= 1 + 1e-6).all()
    # the same numbers by hand, from the wrapper's own embeddings
    row = out.iloc[0]
    files = sorted((tmp_path / "gen" / row["method"] / "L1" / row["block_id"]).glob("*.jpg"))
    img = _unit(tiny_clip.embed(files))
    txt = _unit(tiny_clip.embed_text([ca.panel_texts(bench, row["block_id"], "L1")["clip_location"]])[0])
    assert row["clip_location"] == pytest.approx(float(np.mean(img @ txt)), abs=1e-5)
    # different texts do give different scores (the model is actually used)
    assert not np.allclose(out["clip_prompt"], out["clip_location"])


def test_run_clip_alignment_feeds_the_report(tmp_path, tiny_clip):
    from geofidelity_bench.report import build_report
    from geofidelity_bench.results import load_results

    bench = make_benchmark()
    methods = ["m1", "m2", "m3"]
    _write_generated(tmp_path / "gen", bench, methods)
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    _results_rows(bench, methods).to_csv(results_dir / "results.csv", index=False)
    (results_dir / "run.json").write_text(json.dumps({"gaas": "no segmenter"}))
    scores = ca.run_clip_alignment(results_dir, bench, tmp_path / "gen", encoder=tiny_clip)
    assert (results_dir / "clip_alignment.csv").is_file() and len(scores) == 15
    df, infos = load_results([results_dir])
    rep = build_report(df, tmp_path / "report", run_info=infos, n_resamples=200, rank_resamples=50, plots=False)
    for name in ("clip_associations", "clip_name_sensitivity", "clip_no_retrieval"):
        assert rep["tables"][name]["status"] == "ok", rep["tables"][name]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Table 8" in md and "Location-only text" in md and "Table 9" in md


# -- statistics -----------------------------------------------------------------------------


def _synthetic_scores(seed=0, n_blocks=24, methods=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    score_rows, result_rows = [], []
    for b in range(n_blocks):
        for m in methods:
            for cond in ("L1", "L0"):
                p = np.round(rng.normal(0.3, 0.02), 3)
                loc = np.round(p + rng.normal(0, 0.01), 3)
                s = {"method": m, "condition": cond, "block_id": f"blk{b}", "city": f"c{b % 4}",
                     "clip_prompt": p, "clip_location": loc}
                for text, base in (("prompt", p), ("location", loc)):
                    for alt in ca.ALTERATIONS:
                        s[ca.score_column(text, alt)] = base - rng.normal(0.002, 0.003)
                score_rows.append(s)
                acc = rng.choice([0.0, 0.25, 0.5, 1.0])
                result_rows.append({"method": m, "condition": cond, "block_id": f"blk{b}", "city": f"c{b % 4}",
                                    "cos_sim": np.round(0.5 + 2 * (p - 0.3) + rng.normal(0, 0.03), 3),
                                    "local_margin": rng.normal(0, 0.02), "retrieval_acc": acc})
    return pd.DataFrame(score_rows), pd.DataFrame(result_rows)


def test_alignment_analysis_matches_independent_computation():
    scores, results = _synthetic_scores()
    out = ca.alignment_analysis(scores, results, n_resamples=300, seed=3)
    merged = scores.merge(results, on=["method", "condition", "block_id"])
    merged = merged[merged["condition"] == "L1"]
    assert len(merged) == 72
    assoc = out["associations"].set_index(["outcome", "text"])
    for text in ca.TEXT_KINDS:
        for outcome in ca.OUTCOMES:
            row = assoc.loc[(outcome, text)]
            expected = sstats.spearmanr(merged[f"clip_{text}"], merged[outcome]).statistic
            assert row["estimate"] == pytest.approx(expected, abs=1e-12)
            assert row["n_panels"] == 72 and row["n_blocks"] == 24
            assert row["ci_low"] <= row["ci_high"]
        labels = (merged["retrieval_acc"] == 1.0).to_numpy()
        sc = merged[f"clip_{text}"].to_numpy()
        brute = np.mean([1.0 if p > n else 0.5 if p == n else 0.0
                         for p, n in itertools.product(sc[labels], sc[~labels])])
        assert assoc.loc[("all_retrieve", text), "estimate"] == pytest.approx(brute, abs=1e-12)
    sens = out["name_sensitivity"].set_index(["text", "alteration"])
    for text in ca.TEXT_KINDS:
        for alt in ca.ALTERATIONS:
            d = merged[f"clip_{text}"] - merged[ca.score_column(text, alt)]
            assert sens.loc[(text, alt), "mean_difference"] == pytest.approx(d.mean(), abs=1e-12)
            assert sens.loc[(text, alt), "positive_share"] == pytest.approx((d > 0).mean())
    none = out["no_retrieval"].set_index("text")
    for text in ca.TEXT_KINDS:
        sc = merged[f"clip_{text}"]
        top = merged[sc >= sc.quantile(0.75)]
        assert none.loc[text, "share_no_retrieval_top"] == pytest.approx((top["retrieval_acc"] == 0).mean())
        assert none.loc[text, "share_no_retrieval_all"] == pytest.approx((merged["retrieval_acc"] == 0).mean())
        assert none.loc[text, "n_top"] == len(top)


def test_alignment_analysis_single_class_auroc_is_nan_with_reason():
    scores, results = _synthetic_scores(seed=1)
    results = results.assign(retrieval_acc=0.5)
    out = ca.alignment_analysis(scores, results, n_resamples=100)
    row = out["associations"].set_index(["outcome", "text"]).loc[("all_retrieve", "prompt")]
    assert math.isnan(row["estimate"]) and "one class" in row["reason"]
    with pytest.raises(ValueError, match="'L2'"):
        ca.alignment_analysis(scores, results, condition="L2")


@pytest.mark.filterwarnings("ignore:.*CLIP tokens, more than the 77-token context")  # the tiny tokenizer is per character
def test_clip_alignment_command_feeds_the_report_command(tmp_path, tiny_clip_dir, capsys):
    from geofidelity_bench.benchmark import save_benchmark
    from geofidelity_bench.cli import main

    bench = make_benchmark()
    save_benchmark(bench, tmp_path / "bench")
    methods = ["m1", "m2", "m3"]
    _write_generated(tmp_path / "gen", bench, methods)
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    _results_rows(bench, methods).to_csv(results_dir / "results.csv", index=False)
    assert main(["clip-alignment", "--results", str(results_dir), "--generated", str(tmp_path / "gen"),
                 "--benchmark", str(tmp_path / "bench"), "--clip-weights", str(tiny_clip_dir), "--device", "cpu"]) == 0
    scores = pd.read_csv(results_dir / "clip_alignment.csv")
    assert len(scores) == 15 and scores["clip_prompt"].notna().all()
    assert main(["report", "--results", str(results_dir), "--n-resamples", "200", "--rank-resamples", "50",
                 "--no-plots"]) == 0
    assert "clip_associations            ok" in capsys.readouterr().out
    # a results folder without the condition asked for is a clean error
    assert main(["clip-alignment", "--results", str(results_dir), "--generated", str(tmp_path / "gen"),
                 "--benchmark", str(tmp_path / "bench"), "--clip-weights", str(tiny_clip_dir),
                 "--conditions", "L0"]) == 2


# -- a block without names, --blocks, the offline hint, the recorded weights ------------------


def test_a_block_without_names_is_a_nan_row_under_every_condition():
    from geofidelity_bench.prompts import CONDITIONS, PromptError

    bench = make_benchmark()
    for condition in CONDITIONS:
        t = ca.panel_texts(bench, "gamma_1", condition)  # never raises: one panel never stops a run
        try:
            expected = build_prompt(bench, "gamma_1", condition).text
        except PromptError as err:
            expected = None
            assert f"no {condition} prompt" in t["note"] and str(err) in t["note"], condition
        assert t["clip_prompt"] == expected, condition
        assert all(t[c] is None for c in ca.SCORE_COLUMNS if c != "clip_prompt"), condition
        assert "block has no street_name and no neighborhood: no location text" in t["note"], condition
    # the L1 panel of gamma_1 is refused by the benchmark, so its prompt score is NaN with the reason
    embs = {("m", c, b): np.stack([_vec(f"img:{c}:{b}:{k}") for k in range(2)])
            for c in ("L1", "L0") for b in ("alpha_1", "gamma_1")}
    out = ca.score_panels(StubClip(), bench, list(embs), image_embeddings=embs).set_index(["condition", "block_id"])
    assert math.isnan(out.loc[("L1", "gamma_1"), "clip_prompt"]) and "no L1 prompt" in out.loc[("L1", "gamma_1"), "note"]
    assert np.isfinite(out.loc[("L0", "gamma_1"), "clip_prompt"])
    assert np.isfinite(out.loc[("L1", "alpha_1"), list(ca.SCORE_COLUMNS)].to_numpy(float)).all()


def _all_blocks_generated(root, bench, methods, conditions):
    rng = np.random.default_rng(0)
    for m in methods:
        for c in conditions:
            for b in bench.blocks:
                folder = root / m / c / b.block_id
                folder.mkdir(parents=True)
                for k in range(2):
                    Image.fromarray(rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)).save(folder / f"{k:02d}.jpg")


def _all_blocks_results(bench, methods, conditions):
    rows = []
    for c in conditions:
        df = _results_rows(make_benchmark(), methods, condition=c)
        extra = df[df["block_id"] == "alpha_1"].assign(block_id="gamma_1", city="gamma", country="CC")
        rows += [df, extra]
    return pd.concat(rows, ignore_index=True)


@pytest.fixture
def named_and_unnamed(tmp_path):
    from geofidelity_bench.benchmark import save_benchmark

    bench = make_benchmark()
    save_benchmark(bench, tmp_path / "bench")
    methods = ["m1", "m2", "m3"]
    _all_blocks_generated(tmp_path / "gen", bench, methods, ["L1", "L0"])
    results = tmp_path / "results"
    results.mkdir()
    _all_blocks_results(bench, methods, ["L1", "L0"]).to_csv(results / "results.csv", index=False)
    base = ["clip-alignment", "--results", str(results), "--generated", str(tmp_path / "gen"),
            "--benchmark", str(tmp_path / "bench"), "--device", "cpu"]
    return bench, results, base


@pytest.mark.filterwarnings("ignore:.*CLIP tokens, more than the 77-token context")
def test_command_scores_a_block_without_names_as_nan_and_records_the_weights(named_and_unnamed, tiny_clip_dir, capsys):
    from geofidelity_bench.cli import main
    from geofidelity_bench.encoders import get_encoder

    bench, results, base = named_and_unnamed
    assert main([*base, "--clip-weights", str(tiny_clip_dir)]) == 0
    out = capsys.readouterr().out
    scores = pd.read_csv(results / "clip_alignment.csv", dtype={"block_id": str})
    assert len(scores) == 18 and set(scores["condition"]) == {"L1"}
    gamma = scores[scores["block_id"] == "gamma_1"]
    assert len(gamma) == 3 and gamma["clip_prompt"].isna().all() and gamma["clip_location"].isna().all()
    assert gamma["note"].str.contains("no L1 prompt").all()
    assert scores.loc[scores["block_id"] != "gamma_1", "clip_prompt"].notna().all()
    assert "3 panel(s) have no prompt or no location score" in out and "gamma_1 (L1)" in out
    # the weights and their hashes, as every other output records its model
    enc = get_encoder("clip-vit-b32", weights=str(tiny_clip_dir), device="cpu")
    assert set(scores["clip_weights"]) == {str(tiny_clip_dir)}
    assert set(scores["clip_weights_sha256"]) == {enc.config["weights_sha256"]}
    assert set(scores["clip_config_hash"]) == {enc.config_hash}
    assert "now adds the CLIP tables, from the L1 panels" in out and "reads no CLIP scores" not in out
    # the report still builds its tables from the named panels
    assert main(["report", "--results", str(results), "--n-resamples", "100", "--rank-resamples", "20",
                 "--no-plots"]) == 0
    assert "clip_associations            ok" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*CLIP tokens, more than the 77-token context")
def test_command_takes_blocks_and_says_which_conditions_the_report_reads(named_and_unnamed, tiny_clip_dir, capsys):
    from geofidelity_bench.cli import main

    bench, results, base = named_and_unnamed
    weights = ["--clip-weights", str(tiny_clip_dir)]
    # unknown blocks are refused before the model loads (weights that do not exist are not reached)
    assert main([*base, "--clip-weights", str(results / "no-model"), "--blocks", "alpha_1", "Beta_2", "zeta_9"]) == 2
    err = capsys.readouterr().err
    assert "unknown block id 'Beta_2' (did you mean 'beta_2'?)" in err and "'zeta_9'" in err
    assert not (results / "clip_alignment.csv").exists()
    assert main([*base, *weights, "--blocks", "alpha_1", "gamma_1", "--conditions", "L1", "L0"]) == 0
    out = capsys.readouterr().out
    scores = pd.read_csv(results / "clip_alignment.csv", dtype={"block_id": str})
    assert sorted(set(scores["block_id"])) == ["alpha_1", "gamma_1"] and len(scores) == 12
    assert set(scores["condition"]) == {"L1", "L0"}
    assert "from the L1 panels; it reads no CLIP scores of L0" in out
    assert main([*base, *weights, "--conditions", "L0", "--blocks", "beta_1"]) == 0
    out = capsys.readouterr().out
    assert "from L1 panels only, so it reads none of these (L0)" in out and "now adds" not in out


def test_offline_error_names_the_clip_flag(named_and_unnamed, tmp_path, capsys):
    from geofidelity_bench.cli import main

    _, results, base = named_and_unnamed
    for weights in (str(tmp_path / "no-such-folder"), "no-such-org/no-such-clip"):
        assert main([*base, "--clip-weights", weights]) == 2
        err = capsys.readouterr().err
        assert weights in err and "--clip-weights PATH" in err and "openai/clip-vit-base-patch32" in err
        assert "--encoder-weights" not in err and "efficientnet" not in err.lower()
        assert len(err.strip().splitlines()) == 1
    assert not (results / "clip_alignment.csv").exists()
