"""GeoDiv end to end: a scripted VQA model through the CLI, a tiny random VLM through the real
transformers backend (offline), the offline error, and the evaluate module's ``geodiv`` config."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.geodiv import (
    AnswerCache,
    GeoDivImage,
    TransformersVQA,
    VQABackend,
    VQAUnavailableError,
    answer_questions,
    diversity_tables,
    load_question_bank,
    question_bank_from_dict,
)

NOTA = "None of the above"


# -- a scripted stand-in for the VQA model (replies from the image's mean colour), plugged in as a user's -----
# -- model is: ``--vqa-model vqa_plugin:scripted`` with tests/scripts on the import path ----------------------

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))  # as PYTHONPATH=tests/scripts would
import vqa_plugin  # noqa: E402
from vqa_plugin import ScriptedVQA, mean_code  # noqa: E402

PLUGIN = "vqa_plugin:scripted"


def expected_cell(codes_and_blue: list[tuple[int, float]], question) -> dict:
    """An independent implementation of the docs/benchmark.md section 9, GeoDiv rules for one (group, question)."""
    n_images = len(codes_and_blue)
    chosen = []
    for code, blue in codes_and_blue:
        if question.kind == "background" and blue > 200:
            continue  # unparseable
        chosen.append(code % len(question.choices))
    none_index = len(question.choices) - 1 if question.none_option else None
    n_none = sum(c == none_index for c in chosen)
    none_counts = bool(chosen) and n_none / len(chosen) > 0.3
    kept = [c for c in chosen if c != none_index or none_counts]
    size = question.n_options + (1 if none_counts else 0)
    if len(kept) < 0.5 * n_images or not kept:
        return {"diversity": math.nan, "mean": math.nan, "dropped": True}
    _, counts = np.unique(kept, return_counts=True)
    p = counts / counts.sum()
    d = (math.exp(-(p * np.log(p)).sum()) - 1) / (size - 1)
    mean = float(np.mean([c + 1 for c in kept])) if question.kind == "sevi" else math.nan
    return {"diversity": d, "mean": mean, "dropped": False}


# The generated folder: (method, block) -> RGB colours of its images (red = 36 * code).
PANELS = {
    ("m1", "lund_seg1"): [(0, 0, 0), (36, 0, 0)],
    ("m1", "lund_seg2"): [(72, 120, 0), (108, 0, 0), (216, 0, 0)],  # green 120: replies "Answer: X"
    ("m1", "arezzo_church_streets"): [(0, 0, 0), (0, 0, 0)],
    ("m1", "berlin_am_lustgarten"): [(0, 0, 255), (36, 0, 255)],  # background replies unparseable
    ("m2", "arezzo_church_streets"): [(144, 0, 0), (180, 0, 0)],
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("geodiv_generated")
    for (method, block), colours in PANELS.items():
        folder = root / method / "L1" / block
        folder.mkdir(parents=True)
        for k, colour in enumerate(colours):
            Image.new("RGB", (24, 16), colour).save(folder / f"{k:02d}.png")
    return root


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


def _run_cli(*argv, plugin: str = PLUGIN):
    """Runs ``geodiv`` with the scripted model plugged in; returns (exit status, the backend it built or None)."""
    n_built = len(vqa_plugin.BUILT)
    rc = main(["geodiv", "--no-progress", "--vqa-model", plugin, *argv])
    return rc, (vqa_plugin.BUILT[-1] if len(vqa_plugin.BUILT) > n_built else None)


def test_cli_on_generated_panels_gives_the_expected_tables(generated, demo, tmp_path, capsys):
    bank = load_question_bank()
    out = tmp_path / "out"
    rc, backend = _run_cli("--images", str(generated), "--group-by", "model", "country",
                           "--cache-dir", str(tmp_path / "cache"), "--out", str(out))
    assert rc == 0, capsys.readouterr().err
    # the factory got the command's model options (those given; no revision)
    assert vqa_plugin.CALLS[-1] == {"batch_size": 8, "max_new_tokens": 8, "max_image_side": 768}
    n_images = sum(len(c) for c in PANELS.values())
    assert backend.asked == 9 * len(bank)  # 11 images, 9 distinct colours: each distinct image asked once

    groups = pd.read_csv(out / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    questions = pd.read_csv(out / "geodiv_questions.csv")
    report = json.loads((out / "geodiv.json").read_text())
    assert {(r.model, r.country) for r in groups.itertuples()} == {("m1", "DE"), ("m1", "IT"), ("m1", "SE"),
                                                                   ("m2", "IT")}
    assert groups["n_images"].sum() == n_images

    # Independent expectation for every (group, question) cell and every group mean.
    cells: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for (method, block), colours in PANELS.items():
        country = demo.block(block).country
        for colour in colours:
            code, _, blue = mean_code(Image.new("RGB", (4, 4), colour))
            cells.setdefault((method, country), []).append((code, blue))
    for (method, country), codes in cells.items():
        row = groups[(groups["model"] == method) & (groups["country"] == country)].iloc[0]
        per_kind: dict[str, list[float]] = {"entity": [], "background": []}
        for q in bank:
            exp = expected_cell(codes, q)
            got = questions[(questions["model"] == method) & (questions["country"] == country)
                            & (questions["question_id"] == q.id)].iloc[0]
            assert (got["status"] != "ok") == exp["dropped"], (method, country, q.id)
            if exp["dropped"]:
                assert math.isnan(got["diversity"])
                continue
            assert got["diversity"] == pytest.approx(exp["diversity"], abs=1e-12), (method, country, q.id)
            if q.kind == "sevi":
                assert row[f"{q.attribute}_mean"] == pytest.approx(exp["mean"])
                assert row[f"{q.attribute}_diversity"] == pytest.approx(exp["diversity"], abs=1e-12)
            else:
                per_kind[q.kind].append(exp["diversity"])
        for kind, values in per_kind.items():
            if values:
                assert row[f"{kind}_diversity"] == pytest.approx(np.mean(values), abs=1e-12)
            else:
                assert math.isnan(row[f"{kind}_diversity"])

    # A few cells by hand. m1/IT: both images identical -> every score 0, affluence 1.
    it = groups[(groups["model"] == "m1") & (groups["country"] == "IT")].iloc[0]
    assert it["affluence_mean"] == 1.0 and it["entity_diversity"] == 0.0 and it["background_diversity"] == 0.0
    # m1/SE, codes 0, 1, 2, 3, 6. Affluence letters A B C D B: ratings 1 2 3 4 2.
    se = groups[(groups["model"] == "m1") & (groups["country"] == "SE")].iloc[0]
    assert se["affluence_mean"] == pytest.approx(2.4)
    # Road surface: 6 options + none; code 6 is "none of the above", 1 of 5 (20%) -> dropped; 4 distinct of 6.
    road = questions[(questions["model"] == "m1") & (questions["country"] == "SE")
                     & (questions["question_id"] == "entity_road_surface")].iloc[0]
    assert road["n_none"] == 1 and not road["none_counted"] and road["n_options"] == 6
    assert road["diversity"] == pytest.approx(3 / 5)
    # m1/DE: every background reply unparseable -> all 7 background questions dropped and reported.
    de = groups[(groups["model"] == "m1") & (groups["country"] == "DE")].iloc[0]
    assert de["n_background_questions"] == 0 and de["n_dropped_questions"] == 7 and de["n_unparseable"] == 14
    dropped = pd.read_csv(out / "geodiv_dropped.csv")
    assert len(dropped) == 7 and set(dropped["country"]) == {"DE"} and set(dropped["reason"]) == {"low_coverage"}
    assert report["answer_stats"]["n_unparseable"] == 14
    assert report["unparseable_by_question"]["background_vegetation"] == 2

    assert report["vqa"]["model"] == "scripted-mean-colour" and len(report["vqa"]["config_hash"]) == 64
    assert report["question_bank"]["label"] == "geodiv-street@1.0.0"
    assert report["group_by"] == ["model", "country"]
    for name in ("geodiv_diversity.png", "geodiv_ratings.png", "geodiv_answers.csv"):
        assert (out / name).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "affluence_mean" in printed and "entity_diversity" in printed

    # Second run: every reply comes from the answer cache, the model is not asked again.
    rc, again = _run_cli("--images", str(generated), "--group-by", "model", "country",
                         "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out2"))
    assert rc == 0 and again.asked == 0
    assert (tmp_path / "out2" / "geodiv_groups.csv").read_text() == (out / "geodiv_groups.csv").read_text()


def test_cli_real_baseline_groups_references_and_world_by_country(demo, tmp_path, capsys):
    bank_file = tmp_path / "bank.json"
    bank_file.write_text(json.dumps({
        "name": "mini", "version": "0.1", "none_option": NOTA,
        "questions": [
            {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "Rich?",
             "options": ["Impoverished", "Low-income", "Middle-income", "Affluent", "Luxurious"]},
            {"id": "sky", "kind": "background", "question": "Sky?", "options": ["Clear", "Cloudy", "Rain"]},
        ],
    }))
    # the plugin as a file (FILE.py:FACTORY), loaded without any import path
    rc, _ = _run_cli("--real", "--group-by", "country", "--questions", str(bank_file),
                     "--no-cache", "--out", str(tmp_path / "real"), plugin=f"{SCRIPTS / 'vqa_plugin.py'}:scripted")
    assert rc == 0, capsys.readouterr().err
    groups = pd.read_csv(tmp_path / "real" / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    answers = pd.read_csv(tmp_path / "real" / "geodiv_answers.csv", keep_default_na=False, na_values=[""])
    n_refs = len({r.image_id for r in demo.references})
    assert answers["image"].nunique() == n_refs + len(demo.world)
    assert set(answers["model"]) == {"real_references", "real_world"}
    expected_se = len({r.image_id for r in demo.references if demo.block(r.block_id).country == "SE"}) + sum(
        w.country == "SE" for w in demo.world)
    assert int(groups.set_index("country").loc["SE", "n_images"]) == expected_se
    assert {"IT", "DE", "SE"} <= set(groups["country"])
    report = json.loads((tmp_path / "real" / "geodiv.json").read_text())
    assert report["question_bank"]["label"] == "mini@0.1" and report["answer_cache"] is None


def test_cli_errors_are_clear(tmp_path, capsys):
    rc, _ = _run_cli("--out", str(tmp_path / "x"))
    assert rc == 2 and "--images" in capsys.readouterr().err
    rc, _ = _run_cli("--real", "--group-by", "planet", "--out", str(tmp_path / "x"))
    assert rc == 2 and "planet" in capsys.readouterr().err
    missing = tmp_path / "nope"
    rc, _ = _run_cli("--images", str(missing), "--out", str(tmp_path / "x"))
    assert rc == 2 and str(missing) in capsys.readouterr().err
    # a plugin that cannot be imported, or whose factory builds something else: one line, no traceback
    rc, _ = _run_cli("--real", "--out", str(tmp_path / "x"), plugin="no_such_vqa_module:build")
    err = capsys.readouterr().err
    assert rc == 2 and "cannot import 'no_such_vqa_module'" in err and "Traceback" not in err
    rc, _ = _run_cli("--real", "--out", str(tmp_path / "x"), plugin="vqa_plugin:not_a_backend")
    err = capsys.readouterr().err
    assert rc == 2 and "'vqa_plugin:not_a_backend' returned str, not a VQABackend" in err
    rc, _ = _run_cli("--real", "--out", str(tmp_path / "x"), plugin="vqa_plugin:no_such_factory")
    assert rc == 2 and "has no attribute 'no_such_factory'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_offline_without_weights_names_the_model_and_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(VQAUnavailableError) as err:
        TransformersVQA("geofidelity-test/not-a-real-vlm", device="cpu")
    assert "geofidelity-test/not-a-real-vlm" in str(err.value) and "--vqa-model PATH" in str(err.value)
    with pytest.raises(VQAUnavailableError, match="not a folder saved with save_pretrained"):
        TransformersVQA(tmp_path / "missing-folder", device="cpu")
    # Through the command line: exit status 2 and the same message, no traceback.
    rc = main(["geodiv", "--real", "--no-world", "--vqa-model", "geofidelity-test/not-a-real-vlm", "--device", "cpu",
               "--no-cache", "--out", str(tmp_path / "o")])
    err_text = capsys.readouterr().err
    assert rc == 2 and "geofidelity-test/not-a-real-vlm" in err_text and "Traceback" not in err_text


# -- a tiny random Idefics3 (the default model's architecture), built from config, saved like real weights -----


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
        PreTrainedTokenizerFast,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<pad>", "<|im_start|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>", "<global-img>"]
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["User: Assistant: Answer with the option's letter. A. B. C. None of the above"], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
                                        pad_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    template = ("<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
                "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")
    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": 32}, max_image_size={"longest_edge": 32},
                                                do_image_splitting=True)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=template)
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=32, patch_size=8),
        text_config=LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=2,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-idefics3")
    Idefics3ForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def _mini_bank():
    return question_bank_from_dict({
        "name": "mini", "version": "0.1", "none_option": NOTA,
        "questions": [
            {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "How affluent?",
             "options": ["Impoverished", "Low-income", "Middle-income", "Affluent", "Luxurious"]},
            {"id": "road", "kind": "entity", "question": "Road surface?", "options": ["Asphalt", "Gravel"]},
        ],
    })


def test_tiny_random_vlm_runs_through_the_real_backend_offline(tiny_vlm_dir, generated, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    backend = TransformersVQA(tiny_vlm_dir, device="cpu", batch_size=3, max_new_tokens=4, max_image_side=20)
    cfg = backend.config
    assert cfg["model"] == str(Path(tiny_vlm_dir).resolve()) and cfg["model_type"] == "idefics3"
    assert len(cfg["files_sha256"]) == 64 and cfg["decoding"]["do_sample"] is False and cfg["dtype"] == "float32"
    bank = _mini_bank()
    images = [GeoDivImage(f"img{i}", Image.new("RGB", (40 + 8 * i, 30), (30 * i, 90, 200 - 20 * i)),
                          {"country": "AA" if i < 3 else "BB"}) for i in range(5)]
    cache = AnswerCache(tmp_path / "cache")
    answers = answer_questions(images, bank, backend, cache=cache)
    assert len(answers) == 10 and set(answers["status"]) <= {"ok", "none", "unparseable"}
    assert answers["reply"].map(lambda r: isinstance(r, str)).all()
    tables = diversity_tables(answers, bank, "country")
    total_unparseable = int((answers["status"] == "unparseable").sum())
    assert tables.per_group["n_unparseable"].sum() == total_unparseable
    assert answers.attrs["answer_stats"]["n_asked"] == 10
    # The same config reads every reply back from the cache; greedy decoding is deterministic.
    again = answer_questions(images, bank, backend, cache=AnswerCache(tmp_path / "cache"))
    assert again.attrs["answer_stats"]["n_cached"] == 10 and again["cached"].all()
    assert list(again["reply"]) == list(answers["reply"])
    fresh = answer_questions(images[:2], bank, backend, cache=None)
    assert list(fresh["reply"]) == list(answers["reply"][:4])


def test_tiny_random_vlm_through_the_cli(tiny_vlm_dir, generated, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bank_file = tmp_path / "bank.json"
    bank_file.write_text(json.dumps(_mini_bank().to_dict()))
    out = tmp_path / "out"
    rc = main(["geodiv", "--images", str(generated), "--methods", "m2", "--group-by", "model", "--vqa-model",
               str(tiny_vlm_dir), "--device", "cpu", "--questions", str(bank_file), "--max-new-tokens", "3",
               "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--out", str(out)])
    report = json.loads((out / "geodiv.json").read_text())
    # a random model mostly babbles: exit status 1 exactly when no reply at all could be parsed
    all_unparseable = report["answer_stats"]["n_unparseable"] == report["answer_stats"]["n_pairs"]
    assert report["all_unparseable"] == all_unparseable
    assert rc == (1 if all_unparseable else 0), capsys.readouterr().err
    assert report["vqa"]["model"] == str(Path(tiny_vlm_dir).resolve())
    assert report["vqa"]["config"]["decoding"]["max_new_tokens"] == 3
    assert report["answer_stats"]["n_pairs"] == 4
    n_unp = report["answer_stats"]["n_unparseable"]
    assert report["per_group"][0]["n_unparseable"] == n_unp and report["per_group"][0]["model"] == "m2"


# -- the evaluate module's "geodiv" config -------------------------------------------------------------------


def test_evaluate_geodiv_config_equals_the_library(tmp_path, monkeypatch, generated, demo):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    import evaluate

    from geofidelity_bench import metric_module

    bank = load_question_bank()
    paths = sorted(Path(generated).rglob("*.png"))
    labels = [demo.block(p.parent.name).country for p in paths]
    images = [Image.open(p) if i % 2 else str(p) for i, p in enumerate(paths)]  # PIL images and paths
    backend = ScriptedVQA()
    metric = evaluate.load(metric_module.metric_path(), "geodiv", cache_dir=str(tmp_path / "evaluate"))
    got = metric.compute(predictions=images, references=labels, vqa_model=backend,
                         cache_dir=str(tmp_path / "cache"), return_answers=True)

    direct = [GeoDivImage(f"img{i}", str(p), {"group": lab}) for i, (p, lab) in enumerate(zip(paths, labels))]
    answers = answer_questions(direct, bank, ScriptedVQA(), cache=None)
    tables = diversity_tables(answers, bank, "group")
    want = tables.to_dict()
    assert got["group_by"] == ["group"] and got["question_bank"] == bank.label
    assert got["n_images"] == len(paths) and got["vqa_model"] == "scripted-mean-colour"
    assert got["vqa_config_hash"] == backend.config_hash
    assert len(got["per_group"]) == len(want["per_group"]) == 3
    for a, b in zip(got["per_group"], want["per_group"]):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(b[key], float):
                assert a[key] == pytest.approx(b[key], abs=1e-12), key
            else:
                assert a[key] == b[key], key
    assert [r["question_id"] for r in got["dropped"]] == [r["question_id"] for r in want["dropped"]]
    assert got["n_unparseable"] == int((answers["status"] == "unparseable").sum())
    assert len(got["answers"]) == len(paths) * len(bank)
    with pytest.raises(ValueError, match="not an image"):
        metric.compute(predictions=[[0.1, 0.2], [0.3, 0.4]], references=["A", "B"], vqa_model=backend)
    with pytest.raises(ValueError, match="group label"):
        metric.compute(predictions=[str(paths[0])], references=[""], vqa_model=backend)


def test_a_missing_package_is_not_reported_as_missing_weights():
    from geofidelity_bench.geodiv.vqa import _unavailable

    err = _unavailable("Qwen/Qwen2-VL-2B-Instruct", None, ImportError("Qwen2VLVideoProcessor requires torchvision"),
                       "processor")
    assert "Qwen/Qwen2-VL-2B-Instruct" in str(err) and "pip install torchvision" in str(err)
    assert "save_pretrained" not in str(err)


# -- issue 33: group sizes, one-image groups, sources, a plain labelled folder, nothing parseable, plots ---------


def _mini_bank_file(tmp_path) -> Path:
    path = tmp_path / "mini_bank.json"
    path.write_text(json.dumps({
        "name": "mini", "version": "0.1", "none_option": NOTA,
        "questions": [
            {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "Rich?",
             "options": ["Impoverished", "Low-income", "Middle-income", "Affluent", "Luxurious"]},
            {"id": "road", "kind": "entity", "question": "Road?", "options": ["Asphalt", "Gravel", "Cobble"]},
            {"id": "sky", "kind": "background", "question": "Sky?", "options": ["Clear", "Cloudy", "Rain"]},
        ],
    }))
    return path


def test_demo_photos_in_groups_of_3_9_29_and_one_image_groups(demo, tmp_path, capsys):
    """The issue's scenario: the demo's real photos, rated by the scripted model, grouped by model and country."""
    from geofidelity_bench.geodiv import score_question

    bank = load_question_bank(_mini_bank_file(tmp_path))
    out = tmp_path / "out"
    rc, _ = _run_cli("--real", "--group-by", "model", "country", "--rarefy-n", "3", "--questions",
                     str(_mini_bank_file(tmp_path)), "--no-cache", "--out", str(out))
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    groups = pd.read_csv(out / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    refs = groups[groups["model"] == "real_references"].set_index("country")
    assert refs["n_images"].to_dict() == {"DE": 3, "IT": 9, "SE": 29}
    answers = pd.read_csv(out / "geodiv_answers.csv", keep_default_na=False, na_values=[""])
    for country, row in refs.iterrows():
        for col in ("affluence_diversity", "entity_diversity", "background_diversity"):
            assert row[f"{col}_rarefied_lo"] <= row[f"{col}_rarefied"] <= row[f"{col}_rarefied_hi"]
            assert row[f"{col}_lo"] <= row[f"{col}_hi"]
        assert int(row["rarefy_n"]) == 3
    # DE has exactly 3 photos: its size-matched value is its plain one
    assert refs.loc["DE", "entity_diversity_rarefied"] == pytest.approx(refs.loc["DE", "entity_diversity"])
    # SE: 200 random triples estimate the mean over all C(29, 3) = 3654 triples, computed here by brute force
    se = answers[(answers["model"] == "real_references") & (answers["country"] == "SE")]
    names = sorted(set(se["image"]))
    road = se[se["question_id"] == "road"].set_index("image")
    values = []
    for triple in __import__("itertools").combinations(names, 3):
        s = score_question(bank["road"], [(road.loc[n, "status"], road.loc[n, "choice"]) for n in triple], 3)
        values.append(s.diversity)
    values = np.array(values)
    assert refs.loc["SE", "entity_diversity_rarefied"] == pytest.approx(values.mean(), abs=4 * values.std() / 200 ** 0.5)
    # one-image world countries: n/a with the reason (CSV NaN, JSON null), not 0.000
    world = groups[groups["model"] == "real_world"]
    singles = world[world["n_images"] == 1]
    assert len(singles) > 0 and singles["entity_diversity"].isna().all()
    assert singles["affluence_diversity_rarefied"].isna().all()
    assert set(singles["diversity_na_reason"]) == {"one image: a diversity needs at least 2 images"}
    pairs = world[world["n_images"] == 2]
    assert pairs["entity_diversity"].notna().all() and pairs["entity_diversity_rarefied"].isna().all()
    assert pairs["diversity_na_reason"].str.contains("fewer than 3 images").all()
    report = json.loads((out / "geodiv.json").read_text())
    assert report["size_matching"]["n"] == 3 and report["size_matching"]["replicates"] == 200
    single_json = [r for r in report["per_group"] if r["n_images"] == 1]
    assert all(r["entity_diversity"] is None and r["diversity_na_reason"] for r in single_json)
    assert any("differ in size" in w and "_rarefied" in w for w in report["warnings"])
    assert "warning: groups differ in size" in captured.err and "one image" in captured.err
    assert "Size-matched diversity (every group subsampled to n=3 images" in captured.out
    assert "0.000" not in "".join(line for line in captured.out.splitlines() if "(n=1)" in line)


def test_generated_and_real_photos_are_kept_apart_unless_pooled(generated, demo, tmp_path, capsys):
    bank = str(_mini_bank_file(tmp_path))
    rc, _ = _run_cli("--images", str(generated), "--real", "--no-world", "--questions", bank, "--no-cache",
                     "--out", str(tmp_path / "apart"))
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    groups = pd.read_csv(tmp_path / "apart" / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    se = groups[groups["country"] == "SE"].set_index("origin")["n_images"].to_dict()
    assert se == {"generated": 5, "real": 29}
    report = json.loads((tmp_path / "apart" / "geodiv.json").read_text())
    assert report["group_by"] == ["origin", "country"] and report["sources"]["kept_apart"] is True
    assert "kept apart" in captured.err and "--pool-sources" in captured.err
    rc, _ = _run_cli("--images", str(generated), "--real", "--no-world", "--questions", bank, "--no-cache",
                     "--pool-sources", "--out", str(tmp_path / "pooled"))
    captured = capsys.readouterr()
    pooled = pd.read_csv(tmp_path / "pooled" / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    assert rc == 0 and int(pooled.set_index("country").loc["SE", "n_images"]) == 34
    report = json.loads((tmp_path / "pooled" / "geodiv.json").read_text())
    assert report["group_by"] == ["country"] and report["sources"]["pooled"] is True
    assert "pool images of different origins" in captured.err


def test_a_plain_folder_of_photos_grouped_by_label(tmp_path, capsys):
    folder = tmp_path / "photos"
    colours = {"harbour": [(0, 0, 0), (36, 0, 0), (72, 0, 0)], "market": [(108, 0, 0), (108, 0, 0)],
               "square": [(144, 0, 0)]}
    for label, cs in colours.items():
        (folder / label).mkdir(parents=True)
        for k, c in enumerate(cs):
            Image.new("RGB", (20, 12), c).save(folder / label / f"p{k}.jpg" if k % 2 else folder / label / f"p{k}.png")
    (folder / ".DS_Store").write_text("ignored")
    bank = load_question_bank(_mini_bank_file(tmp_path))
    rc, _ = _run_cli("--labelled-images", str(folder), "--questions", str(_mini_bank_file(tmp_path)), "--no-cache",
                     "--out", str(tmp_path / "out"))
    assert rc == 0, capsys.readouterr().err
    groups = pd.read_csv(tmp_path / "out" / "geodiv_groups.csv", keep_default_na=False, na_values=[""])
    assert list(groups["label"]) == ["harbour", "market", "square"] and list(groups["n_images"]) == [3, 2, 1]
    for label, cs in colours.items():
        row = groups.set_index("label").loc[label]
        codes = [(mean_code(Image.new("RGB", (4, 4), c))[0], 0.0) for c in cs]
        exp = expected_cell(codes, bank["road"])
        if len(cs) == 1:
            assert math.isnan(row["entity_diversity"]) and row["diversity_na_reason"].startswith("one image")
        else:
            assert row["entity_diversity"] == pytest.approx(exp["diversity"], abs=1e-12)
    # what the folder must look like, said once with every offending path, before any model runs
    (folder / "notes.txt").write_text("x")
    (folder / "harbour" / "sub").mkdir()
    (folder / "empty").mkdir()
    rc, backend = _run_cli("--labelled-images", str(folder), "--no-cache", "--out", str(tmp_path / "bad"))
    err = capsys.readouterr().err
    assert rc == 2 and backend is None and "Traceback" not in err
    assert "notes.txt" in err and str(Path("harbour") / "sub") in err and "empty" in err
    assert not (tmp_path / "bad").exists()


MUMBLING_PLUGIN = '''
from geofidelity_bench.geodiv import VQABackend

class Mumbling(VQABackend):
    def __init__(self):
        super().__init__()
        self._config = {"backend": "test:mumbling", "model": "mumbling"}
    def ask(self, images, questions):
        return ["I would rather not say"] * len(images)

def build(**options):
    return Mumbling()
'''


def test_all_replies_unparseable_is_loud_and_exits_1(demo, tmp_path, capsys):
    plugin = tmp_path / "mumbling.py"
    plugin.write_text(MUMBLING_PLUGIN)
    rc, _ = _run_cli("--real", "--no-world", "--questions", str(_mini_bank_file(tmp_path)), "--no-cache",
                     "--out", str(tmp_path / "out"), plugin=f"{plugin}:build")
    err = capsys.readouterr().err
    assert rc == 1
    n_images = len({r.image_id for r in demo.references})
    assert f"every reply was unparseable ({n_images * 3} replies: {n_images} images x 3 questions)" in err
    assert "'I would rather not say'" in err and "VQA model or plugin" in err and "exit status 1" in err
    report = json.loads((tmp_path / "out" / "geodiv.json").read_text())
    assert report["all_unparseable"] is True and "every reply was unparseable" in report["warnings"][0]
    assert (tmp_path / "out" / "geodiv_answers.csv").exists()  # written, to look at the replies


def test_plots_tell_missing_from_zero_show_n_and_keep_legends_off_titles(tmp_path):
    from geofidelity_bench.geodiv.plots import diversity_figure, ratings_figure

    bank = question_bank_from_dict(json.loads(_mini_bank_file(tmp_path).read_text()))
    rows = []
    for country, picks in {"AA": [0, 0, 0], "BB": [0, 1, 2, 1], "CC": [2]}.items():
        for i, k in enumerate(picks):
            for q in bank:
                rows.append({"image": f"{country}{i}", "question_id": q.id, "status": "ok",
                             "choice": q.options[k], "country": country})
    tables = diversity_tables(pd.DataFrame(rows), bank, "country")
    fig = diversity_figure(tables)
    fig.canvas.draw()
    axes = fig.axes
    labels = [t.get_text() for t in axes[0].get_yticklabels()]
    assert labels == ["AA (n=3)", "BB (n=4)", "CC (n=1)"][::-1] or labels == ["AA (n=3)", "BB (n=4)", "CC (n=1)"]
    texts = [t.get_text() for t in axes[0].texts]
    assert "n/a" in texts and "0.00" in texts  # CC is missing, AA is a true zero
    assert any(p.get_hatch() for p in axes[0].patches)
    assert len(axes[0].collections) > 0  # interval whiskers
    fig = ratings_figure(tables)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert not any(legend.overlaps(t) for t in titles)
        assert legend.y1 < ax.get_window_extent(renderer).y0  # below its own panel


@pytest.mark.parametrize("option, value, message", [
    ("--rarefy-n", "1", "--rarefy-n must be at least 2 (a diversity needs 2 images), got 1"),
    ("--n-resamples", "0", "--n-resamples must be positive, got 0"),
])
def test_size_matching_options_are_checked_before_any_model_runs(option, value, message, tmp_path, capsys):
    rc, backend = _run_cli("--real", option, value, "--no-cache", "--out", str(tmp_path / "out"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == f"geofidelity-bench geodiv: error: {message}"
    assert backend is None and not (tmp_path / "out").exists()
