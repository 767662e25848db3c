"""Generation harness: registry, seeds, the offline tiny pipeline, the runner, resume, manifest, CLI."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from geofidelity_bench import load_benchmark
from geofidelity_bench.generation import (
    BUILTIN_GENERATORS,
    PAPER_GENERATORS,
    GeneratorError,
    GeneratorRegistry,
    GeneratorSpec,
    image_seed,
    register_generator,
    resolve_generator,
)
from geofidelity_bench.generation.manifest import (
    MANIFEST_COLUMNS,
    MANIFEST_FILE,
    VOLATILE_COLUMNS,
    ManifestJournal,
    journal_files,
    load_manifest,
    merge_manifest,
)
from geofidelity_bench.generation.runner import plan_units, run_generation
from geofidelity_bench.prompts import NEGATIVE_PROMPT, PromptError, build_prompt

SCRIPTS = Path(__file__).parent / "scripts"
NAMED_BLOCK = "berlin_am_lustgarten"
CONDITIONS = ["L0", "GPS_ONLY", "L1"]
N = 2


def spec_seed(model: str, block_id: str, condition: str, k: int) -> int:
    """The docs/benchmark.md section 3, Generation formula, written out independently of the library."""
    digest = hashlib.sha256(f"{model}/{block_id}/{condition}/{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def jpg_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.jpg"))
    }


def stable_manifest(root: Path) -> list[dict]:
    """The merged manifest file's rows without the when/where columns (timings, process, device)."""
    rows = pq.read_table(root / "manifest.parquet").to_pylist()
    return [{k: v for k, v in r.items() if k not in VOLATILE_COLUMNS} for r in rows]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("demo")


@pytest.fixture(scope="module")
def tiny_run(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_run")
    messages: list[str] = []
    summary = run_generation(
        bench, ["tiny"], CONDITIONS, out, images_per_block=N, progress=False, log=messages.append
    )
    return out, summary, messages


# -- registry and seeds ----------------------------------------------------------------------


def test_registry_has_the_six_spec_generators_and_tiny():
    expected = {
        "sdxl": ("stabilityai/stable-diffusion-xl-base-1.0", "StableDiffusionXLPipeline", 30, 5.0, "fp16", False),
        "sd35_large": ("stabilityai/stable-diffusion-3.5-large", "StableDiffusion3Pipeline", 28, 3.5, "bf16", True),
        "flux_dev": ("black-forest-labs/FLUX.1-dev", "FluxPipeline", 28, 3.5, "bf16", True),
        "flux_schnell": ("black-forest-labs/FLUX.1-schnell", "FluxPipeline", 4, 0.0, "bf16", True),
        "pixart_sigma": ("PixArt-alpha/PixArt-Sigma-XL-2-1024-MS", "PixArtSigmaPipeline", 20, 4.5, "fp16", False),
        "hunyuan_dit": ("Tencent-Hunyuan/HunyuanDiT-Diffusers", "HunyuanDiTPipeline", 50, 5.0, "fp16", False),
    }
    assert tuple(expected) == PAPER_GENERATORS
    for key, (weights, cls, steps, guidance, dtype, offload) in expected.items():
        s = BUILTIN_GENERATORS[key]
        assert (s.weights, s.pipeline_class, s.steps, s.guidance, s.dtype, s.cpu_offload) == (
            weights, cls, steps, guidance, dtype, offload
        )
        assert (s.height, s.width) == (1024, 1024)
        flux = key.startswith("flux")
        assert s.negative_prompt is (not flux)
        assert dict(s.call_kwargs) == ({"max_sequence_length": 256} if flux else {})
    tiny = BUILTIN_GENERATORS["tiny"]
    assert tiny.kind == "factory" and tiny.steps == 2 and tiny.height <= 64


def test_seed_formula_and_generators():
    assert image_seed("sdxl", "berlin_am_lustgarten", "L1", 3) == spec_seed("sdxl", "berlin_am_lustgarten", "L1", 3)
    seeds = {image_seed(m, b, c, k) for m in ("a", "b") for b in ("x", "y") for c in ("L0", "L1") for k in range(4)}
    assert len(seeds) == 32 and all(0 <= s < 2**63 for s in seeds)


def test_register_and_resolve_user_generators():
    reg = GeneratorRegistry()
    spec = register_generator("mine", weights="org/some-pipeline", steps=8, guidance=1.5, registry=reg)
    assert reg.get("mine") is spec and spec.kind == "diffusers" and spec.dtype == "fp16"
    with pytest.raises(GeneratorError, match="already registered"):
        register_generator("mine", weights="org/other", registry=reg)
    grey = register_generator("grey", lambda p, n, g, **kw: Image.new("RGB", (8, 8)), registry=reg)
    assert grey.kind == "callable"
    with pytest.raises(GeneratorError, match="exactly one"):
        GeneratorSpec("bad")
    with pytest.raises(GeneratorError, match="path component"):
        GeneratorSpec("a/b", weights="x/y")
    with pytest.raises(GeneratorError, match="unknown generator"):
        resolve_generator("no_such_model", registry=reg)
    assert resolve_generator("org/pipe").weights == "org/pipe" and resolve_generator("org/pipe").key == "org__pipe"
    assert resolve_generator("alias=diffusers:org/pipe").key == "alias"
    assert resolve_generator("t2=tiny").key == "t2" and resolve_generator("t2=tiny").kind == "factory"
    spec = resolve_generator(f"c={SCRIPTS / 'gen_plugin.py'}:coordinate_painter")
    assert spec.kind == "callable" and spec.key == "c"


def test_plan_orders_units_and_refuses_unnamed_blocks(bench):
    units, refused = plan_units(bench, ["tiny"], ["L0", "L1"], images_per_block=2)
    assert [u.block_id for u in units if u.condition == "L1"] == [NAMED_BLOCK, NAMED_BLOCK]
    assert {r.block_id for r in refused} == set(bench.block_ids) - {NAMED_BLOCK}
    assert all(r.condition == "L1" and "no street_name" in r.reason for r in refused)
    keys = [(u.condition, u.block_id, u.k) for u in units]
    assert keys == sorted(keys, key=lambda t: (["L0", "L1"].index(t[0]), t[1], t[2]))


# -- the tiny pipeline end to end --------------------------------------------------------------


def test_tiny_generates_panels_for_the_demo_benchmark(bench, tiny_run):
    out, summary, messages = tiny_run
    files = jpg_hashes(out)
    expected = {
        f"tiny/{c}/{b}/{k:02d}.jpg" for c in ("L0", "GPS_ONLY") for b in bench.block_ids for k in range(N)
    } | {f"tiny/L1/{NAMED_BLOCK}/{k:02d}.jpg" for k in range(N)}
    assert set(files) == expected
    assert summary.generated == len(expected) and summary.skipped == 0
    assert {r["block_id"] for r in summary.refused} == set(bench.block_ids) - {NAMED_BLOCK}
    assert any("refused 6" in m and "lund_seg1" in m for m in messages)
    assert any("images/s" in m for m in messages)
    with Image.open(out / sorted(expected)[0]) as img:
        assert img.format == "JPEG" and img.size == (512, 512) and img.mode == "RGB"
    # Different seeds and prompts give different pictures.
    assert len(set(files.values())) == len(files)
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["generation_summary.json", MANIFEST_FILE]
    saved = json.loads((out / "generation_summary.json").read_text())
    assert saved["generated"] == len(expected) and saved["images_per_s"] > 0


def test_manifest_rows_describe_every_image(bench, tiny_run):
    out, _, _ = tiny_run
    df = load_manifest(out)
    assert list(df.columns) == list(MANIFEST_COLUMNS)
    assert len(df) == len(jpg_hashes(out)) and not df.duplicated(["model", "condition", "block_id", "k"]).any()
    for row in df.to_dict("records"):
        path = out / row["path"]
        assert row["path"] == f"tiny/{row['condition']}/{row['block_id']}/{row['k']:02d}.jpg"
        assert row["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert row["seed"] == spec_seed("tiny", row["block_id"], row["condition"], row["k"])
        assert row["prompt"] == build_prompt(bench, row["block_id"], row["condition"]).text
        assert row["negative_prompt"] == NEGATIVE_PROMPT
        assert (row["steps"], row["guidance"], row["dtype"], row["height"]) == (2, 5.0, "fp32", 64)
        assert row["torch_version"] and row["diffusers_version"] and row["geofidelity_bench_version"]
        assert row["benchmark_fingerprint"] == bench.fingerprint and row["duration_s"] > 0
        assert (row["process_index"], row["num_processes"]) == (0, 1)


@pytest.mark.slow
def test_batch_size_does_not_change_the_files(bench, tiny_run, tmp_path):
    out, _, _ = tiny_run
    run_generation(bench, ["tiny"], ["L0", "L1"], tmp_path, images_per_block=N, batch_size=3, progress=False, log=lambda m: None)
    batched = jpg_hashes(tmp_path)
    assert batched and all(batched[p] == jpg_hashes(out)[p] for p in batched)
    assert set(load_manifest(tmp_path)["batch_size"]) == {3}


def test_rerun_skips_and_repairs_missing_corrupt_and_changed_images(bench, tiny_run, tmp_path):
    import shutil

    src, _, _ = tiny_run
    shutil.copytree(src, tmp_path / "out")
    out = tmp_path / "out"
    before_files, before_rows = jpg_hashes(out), stable_manifest(out)
    mtimes = {p: (out / p).stat().st_mtime_ns for p in before_files}

    again = run_generation(bench, ["tiny"], CONDITIONS, out, images_per_block=N, progress=False, log=lambda m: None)
    assert again.generated == 0 and again.skipped == len(before_files)
    assert all((out / p).stat().st_mtime_ns == t for p, t in mtimes.items())

    missing, corrupt = "tiny/L0/lund_seg1/01.jpg", f"tiny/L1/{NAMED_BLOCK}/00.jpg"
    (out / missing).unlink()
    (out / corrupt).write_bytes((out / corrupt).read_bytes()[:100])
    # A killed writer's leftovers: a torn journal line, a duplicate row, a temp file.
    row = load_manifest(out).iloc[0].to_dict()
    with ManifestJournal(out, tag="dead-0") as journal:
        journal.append(row)
    with open(out / "manifest.part-dead-0.jsonl", "ab") as fh:
        fh.write(b'{"model": "tiny", "condition": "L0", "blo')
    (out / "tiny/L0/lund_seg1/.01.jpg.tmp").write_bytes(b"partial")

    repaired = run_generation(bench, ["tiny"], CONDITIONS, out, images_per_block=N, progress=False, log=lambda m: None)
    assert repaired.generated == 2
    assert jpg_hashes(out) == before_files
    assert stable_manifest(out) == before_rows
    assert journal_files(out) == [] and not list(out.rglob("*.tmp"))


def test_changed_settings_regenerate_only_with_overwrite(bench, tiny_run, tmp_path):
    import shutil

    from geofidelity_bench.generation.runner import GenerationFolderError

    src, _, _ = tiny_run
    shutil.copytree(src, tmp_path / "out")
    out = tmp_path / "out"
    three_steps = BUILTIN_GENERATORS["tiny"].replace(steps=3)
    # Other settings and a smaller panel than before: refused, naming both, before anything is generated.
    with pytest.raises(GenerationFolderError, match=r"(?s)tiny/L0/lund_seg1/00\.jpg \(differs in steps\).*"
                                                    r"beyond --images-per-block.*tiny/L0/lund_seg1/01\.jpg"):
        run_generation(bench, [three_steps], ["L0"], out, images_per_block=1, block_ids=["lund_seg1"], progress=False,
                       log=lambda m: None)
    assert jpg_hashes(out) == jpg_hashes(src)
    s = run_generation(bench, [three_steps], ["L0"], out, images_per_block=1, block_ids=["lund_seg1"], progress=False,
                       overwrite=True, log=lambda m: None)
    assert s.generated == 1 and not (out / "tiny/L0/lund_seg1/01.jpg").exists()
    df = load_manifest(out)
    row = df[(df.block_id == "lund_seg1") & (df.condition == "L0") & (df.k == 0)].iloc[0]
    assert row["steps"] == 3 and len(df) == len(load_manifest(src)) - 1


def test_strict_mode_refuses_unnamed_blocks(bench, tmp_path):
    with pytest.raises(PromptError, match="lund_seg1"):
        run_generation(bench, ["tiny"], ["L1"], tmp_path, strict=True, progress=False)
    assert not list(tmp_path.rglob("*.jpg"))


def test_callable_generator_receives_block_metadata(bench, tmp_path):
    seen = []

    def painter(prompt, negative_prompt, generator, *, block, prompt_info, seed):
        import torch

        seen.append((block.block_id, prompt_info.condition, seed, negative_prompt, prompt))
        value = int(torch.randint(0, 255, (1,), generator=generator))
        return Image.new("RGB", (16, 16), (value, int(abs(block.centroid[0])) % 255, 0))

    spec = GeneratorSpec("painter", fn=painter, negative_prompt=False, dtype="fp32", steps=1, guidance=0.0)
    s = run_generation(bench, [spec], ["GPS_ONLY"], tmp_path, images_per_block=1, progress=False, log=lambda m: None)
    assert s.generated == len(bench.block_ids)
    assert {b for b, *_ in seen} == set(bench.block_ids)
    assert all(seed == spec_seed("painter", b, "GPS_ONLY", 0) and neg is None for b, _, seed, neg, _ in seen)
    df = load_manifest(tmp_path)
    assert df["negative_prompt"].isna().all() and (df["weights"].str.startswith("callable:")).all()


def test_merge_keeps_rows_of_live_journals(bench, tiny_run, tmp_path):
    import shutil

    src, _, _ = tiny_run
    shutil.copytree(src, tmp_path / "out")
    out = tmp_path / "out"
    rows = load_manifest(out).to_dict("records")
    (out / MANIFEST_FILE).unlink()
    with ManifestJournal(out, tag="live-1") as journal:
        for row in rows:
            journal.append(row)
        report = merge_manifest(out)  # the writer still holds its lock: merged but kept
        assert report.rows == len(rows) and report.journals_kept == 1
        assert journal_files(out)
    report = merge_manifest(out)
    assert report.journals_merged == 1 and journal_files(out) == [] and report.rows == len(rows)


# -- command line ----------------------------------------------------------------------------------


def test_cli_generate_with_a_plugin_file(tmp_path, capsys):
    from geofidelity_bench.cli import main

    plugin = SCRIPTS / "gen_plugin.py"
    rc = main(
        ["generate", "--plugin", str(plugin), "--model", "coords", f"c2={plugin}:coordinate_painter",
         "--conditions", "L0", "L2", "--images-per-block", "1", "--out", str(tmp_path), "--no-progress"]
    )
    assert rc == 0
    out = capsys.readouterr()
    assert "refused 6" in out.err and "L2: arezzo_church_streets" in out.err
    files = jpg_hashes(tmp_path)
    assert len(files) == 2 * (7 + 1)
    assert f"coords/L2/{NAMED_BLOCK}/00.jpg" in files and f"c2/L2/{NAMED_BLOCK}/00.jpg" in files
    # Same callable, different model key: different seeds, different files.
    assert files[f"coords/L0/lund_seg1/00.jpg"] != files[f"c2/L0/lund_seg1/00.jpg"]


def test_cli_errors_are_clear(tmp_path, capsys):
    from geofidelity_bench.cli import main

    assert main(["generate", "--model", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown generator 'nope'" in capsys.readouterr().err
    assert main(["generate", "--model", "tiny", "--conditions", "L1", "--strict", "--out", str(tmp_path)]) == 2
    assert "lund_seg1" in capsys.readouterr().err
    assert main(["generate", "--model", "tiny", "--blocks", "no_block", "--out", str(tmp_path)]) == 2
    assert "no_block" in capsys.readouterr().err
    assert main(["generate", "--list-models"]) == 0
    listed = capsys.readouterr().out
    assert all(k in listed for k in PAPER_GENERATORS)


def test_panel_encoding_is_lanczos_512_jpeg95():
    from geofidelity_bench.generation.manifest import encode_panel

    img = Image.new("RGB", (64, 64), (10, 200, 30))
    data = encode_panel(img)
    expected = io.BytesIO()
    img.resize((512, 512), Image.Resampling.LANCZOS).save(expected, format="JPEG", quality=95)
    assert data == expected.getvalue()


def test_control_prompts_record_their_donors(bench, tmp_path):
    import dataclasses

    from geofidelity_bench.benchmark import Benchmark

    blocks = [
        dataclasses.replace(b, street_name="Testgatan", neighborhood="Centrum") if b.block_id == "lund_seg1" else b
        for b in bench.blocks
    ]
    named = Benchmark(blocks, bench.references, cities=bench.cities.values(), name="demo-named", validate_images=False)
    spec = GeneratorSpec("flat", fn=lambda p, n, g, **kw: Image.new("RGB", (8, 8)), dtype="fp32", steps=1)
    conditions = ["C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"]
    s = run_generation(named, [spec], conditions, tmp_path, images_per_block=1, progress=False, log=lambda m: None)
    assert s.generated == 6  # berlin and lund_seg1 donate to each other
    df = load_manifest(tmp_path).set_index(["condition", "block_id"])
    assert df.loc[("C_WRONG_STREET", NAMED_BLOCK), "street_donor"] == "lund_seg1"
    assert "Testgatan" in df.loc[("C_WRONG_STREET", NAMED_BLOCK), "prompt"]
    assert df.loc[("C_SHUFFLED_NEIGHBORHOOD", "lund_seg1"), "neighborhood_donor"] == NAMED_BLOCK
    row = df.loc[("C_WRONG_STREET_NEIGHBORHOOD", "lund_seg1")]
    assert (row["street_donor"], row["neighborhood_donor"]) == (NAMED_BLOCK, NAMED_BLOCK)


@pytest.mark.slow
def test_generate_prints_no_torchvision_fallback_warning(tmp_path):
    """transformers warns that its image processors fall back to PIL without torchvision; generate drops exactly that."""
    import os
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "geofidelity_bench.cli", "generate", "--model", "tiny", "--conditions", "L0",
         "--blocks", "lund_seg1", "--images-per-block", "1", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert res.returncode == 0, res.stderr
    assert "torchvision" not in res.stdout + res.stderr
    assert "generation summary: 1 image(s) generated" in res.stdout + res.stderr


def test_the_torchvision_filter_lets_other_transformers_warnings_through():
    import logging

    from geofidelity_bench.generation.backends import _TRANSFORMERS_IMPORT_LOGGER, quiet_torchvision_fallback

    logger = logging.getLogger(_TRANSFORMERS_IMPORT_LOGGER)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        with quiet_torchvision_fallback():
            logger.warning("`XImageProcessor` requires torchvision (not installed); falling back to `XImageProcessorPil`")
            logger.warning("something else")
        logger.warning("`Y` requires torchvision (not installed); falling back to `YPil` after loading")
    finally:
        logger.removeHandler(handler)
    assert seen == ["something else", "`Y` requires torchvision (not installed); falling back to `YPil` after loading"]


def test_reuse_keys_cover_every_setting_that_evaluate_checks():
    from geofidelity_bench.generated_folder import SETTINGS_COLUMNS
    from geofidelity_bench.generation.manifest import REUSE_COLUMNS

    assert set(SETTINGS_COLUMNS) <= set(REUSE_COLUMNS) and {"seed", "prompt"} <= set(REUSE_COLUMNS)


def test_another_pipeline_is_not_reused_and_evaluate_accepts_what_generate_made(bench, tiny_run, tmp_path):
    """Images made with another pipeline are not kept as this run's (issue 28, part 7): reusing them left a
    method with two pipelines in one folder, which `evaluate`'s manifest check then refused."""
    import shutil

    from geofidelity_bench.evaluation import read_generated_folder
    from geofidelity_bench.generated_folder import check_generation_manifest
    from geofidelity_bench.generation.runner import GenerationFolderError

    src, _, _ = tiny_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    tiny = BUILTIN_GENERATORS["tiny"]
    assert set(load_manifest(out)["pipeline"]) == {tiny.pipeline_class} != {"DiffusionPipeline"}
    other = tiny.replace(pipeline_class="DiffusionPipeline")
    with pytest.raises(GenerationFolderError, match=r"tiny/L0/lund_seg1/00\.jpg \(differs in pipeline\)"):
        run_generation(bench, [other], [*CONDITIONS, "L2"], out, images_per_block=N, progress=False,
                       log=lambda m: None)
    assert jpg_hashes(out) == jpg_hashes(src)
    s = run_generation(bench, [other], [*CONDITIONS, "L2"], out, images_per_block=N, progress=False,
                       overwrite=True, log=lambda m: None)
    assert s.generated == len(jpg_hashes(src)) + N  # every earlier image again, and L2 for the named block
    assert set(load_manifest(out)["pipeline"]) == {"DiffusionPipeline"}
    panels = read_generated_folder(out, bench)  # runs the manifest check: one pipeline per method
    assert check_generation_manifest(out, panels).problems == []


# -- CPU offload: honoured or refused, never ignored (issue 41, point 6) ------------------------------


def test_cli_cpu_offload_of_tiny_on_the_cpu_is_refused_in_one_line(tmp_path, capsys):
    from geofidelity_bench.cli import main

    out = tmp_path / "out"
    rc = main(["generate", "--model", "tiny", "--cpu-offload", "--device", "cpu", "--conditions", "L0",
               "--blocks", "lund_seg1", "--images-per-block", "1", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert "generator 'tiny'" in err and "--cpu-offload needs a CUDA device" in err
    assert "run without --cpu-offload" in err
    assert not out.exists()  # refused before anything was written
    # without the flag (the model's default) and with --no-cpu-offload the same run goes through
    assert main(["generate", "--model", "tiny", "--no-cpu-offload", "--device", "cpu", "--conditions", "L0",
                 "--blocks", "lund_seg1", "--images-per-block", "1", "--out", str(out), "--no-progress"]) == 0
    assert len(jpg_hashes(out)) == 1


def test_library_cpu_offload_is_refused_where_it_cannot_apply(bench, tmp_path):
    from geofidelity_bench.generation.backends import load_generator

    tiny = resolve_generator("tiny")
    with pytest.raises(GeneratorError, match="generator 'tiny': --cpu-offload needs a CUDA device"):
        load_generator(tiny, device="cpu", cpu_offload=True)
    with pytest.raises(GeneratorError, match="needs a CUDA device"):
        run_generation(bench, ["tiny"], ["L0"], tmp_path, images_per_block=1, block_ids=["lund_seg1"],
                       cpu_offload=True, progress=False, log=lambda m: None, device="cpu")
    assert not list(tmp_path.rglob("*.jpg"))
    from geofidelity_bench.generation.backends import cpu_offload_refusal

    flat = GeneratorSpec("flat", fn=lambda p, n, g, **kw: Image.new("RGB", (8, 8)), dtype="fp32", steps=1)
    refusal = cpu_offload_refusal(flat, "cuda:0", True)
    assert refusal and "generator 'flat' is a Python callable" in refusal and "without --cpu-offload" in refusal
    with pytest.raises(GeneratorError, match="Python callable"):
        load_generator(flat, device="cuda:0", cpu_offload=True)
    # a model's own default is not a request: never refused
    assert cpu_offload_refusal(tiny.replace(cpu_offload=True), "cpu", None) is None
    assert cpu_offload_refusal(tiny, "cuda:0", True) is None


class _RecordingPipeline:
    """A factory pipeline that records where the library puts it (no weights: the CUDA path on a CPU)."""

    def __init__(self, offloadable: bool = True) -> None:
        import torch

        self.dtype = torch.float32
        self.calls: list = []
        if offloadable:
            self.enable_model_cpu_offload = lambda device=None: self.calls.append(("offload", str(device)))

    def to(self, *args, **kwargs):
        self.calls.append(("to", *map(str, args), *(f"{k}={v}" for k, v in kwargs.items())))
        return self


def test_factory_pipelines_are_offloaded_on_cuda_like_hub_ones():
    from geofidelity_bench.generation.backends import load_generator

    built: list = []

    def factory(offloadable=True):
        built.append(_RecordingPipeline(offloadable))
        return built[-1]

    spec = GeneratorSpec("fake", pipeline_factory=factory, dtype="fp32", steps=1)
    gen = load_generator(spec, device="cuda:0", cpu_offload=True)
    assert gen.pipe.calls == [("offload", "cuda:0")]  # honoured: accelerate's hooks, never .to(cuda)
    assert load_generator(spec.replace(cpu_offload=True), device="cuda:0").pipe.calls == [("offload", "cuda:0")]
    assert load_generator(spec, device="cuda:0").pipe.calls == [("to", "cuda:0")]  # resident by default
    assert load_generator(spec, device="cuda:0", cpu_offload=False).pipe.calls == [("to", "cuda:0")]
    not_diffusers = spec.replace(pipeline_factory=lambda: factory(offloadable=False))
    with pytest.raises(GeneratorError, match=r"generator 'fake': its pipeline \(_RecordingPipeline\) has no "
                                             r"enable_model_cpu_offload.*without --cpu-offload"):
        load_generator(not_diffusers, device="cuda:0", cpu_offload=True)
    # an already built pipeline handed in is offloaded too
    given = _RecordingPipeline()
    load_generator(spec, device="cuda:0", cpu_offload=True, pipeline=given)
    assert given.calls == [("offload", "cuda:0")]
