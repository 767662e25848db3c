"""The generated-folder convention: conditions, names, duplicate indices, the generation manifest,
and `generate` into a folder made with other settings (issue 16, section 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from geofidelity_bench import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import EvaluationError, read_generated_folder
from geofidelity_bench.generation import GeneratorSpec
from geofidelity_bench.generation.manifest import MANIFEST_FILE, file_sha256, load_manifest
from geofidelity_bench.generation.runner import GenerationFolderError, run_generation
from geofidelity_bench.prompts import CONDITIONS

PLUGIN = Path(__file__).parent / "scripts" / "gen_plugin.py"


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


def _painter(prompt, negative_prompt, generator, *, block, height, width, **kw):
    """A fast seeded generator (noise from the unit's torch generator), so files depend on the seed."""
    import numpy as np
    from PIL import Image

    import torch

    noise = torch.rand((height, width, 3), generator=generator).numpy() * 255.0
    return Image.fromarray(noise.astype(np.uint8))


def _spec(**changes) -> GeneratorSpec:
    spec = GeneratorSpec("painter", fn=_painter, negative_prompt=False, dtype="fp32", steps=1, guidance=0.0,
                         height=16, width=16)
    return spec.replace(**changes) if changes else spec


def _generate(bench, out, *, n=2, blocks=("lund_seg1", "berlin_am_lustgarten"), spec=None, **kw):
    return run_generation(bench, [spec or _spec()], ["L0"], out, images_per_block=n, block_ids=list(blocks),
                          progress=False, log=lambda m: None, **kw)


def _write_panel(root, method, condition, block_id, data, names=("00.jpg", "01.jpg")):
    folder = root / method / condition / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(data)
    return folder


def _problems(root, bench, **kw) -> str:
    with pytest.raises(EvaluationError) as info:
        read_generated_folder(root, bench, **kw)
    return str(info.value)


# -- conditions ----------------------------------------------------------------------------------------


def test_unknown_conditions_are_refused_with_did_you_mean(demo, tmp_path):
    img = demo.world[0].image_bytes
    for cond in ("l1", "L3", "NOT_A_CONDITION", "L1"):
        _write_panel(tmp_path, "m", cond, "lund_seg1", img)
    msg = _problems(tmp_path, demo)
    known = ", ".join(CONDITIONS)
    assert re.search(r"l1: unknown condition 'l1' \(did you mean 'L1'\?\); known conditions: " + re.escape(known), msg)
    assert "unknown condition 'L3' (did you mean 'L2'?)" in msg  # the published release's name for L2
    assert "unknown condition 'NOT_A_CONDITION'; known conditions" in msg
    assert "--extra-conditions NOT_A_CONDITION" in msg
    assert "3 problem(s)" in msg


def test_declared_extra_conditions_are_read(demo, tmp_path):
    img = demo.world[0].image_bytes
    _write_panel(tmp_path, "m", "L1", "lund_seg1", img)
    _write_panel(tmp_path, "m", "MY_STYLE", "lund_seg1", img)
    panels = read_generated_folder(tmp_path, demo, extra_conditions=["MY_STYLE"])
    assert sorted(panels) == [("m", "L1", "lund_seg1"), ("m", "MY_STYLE", "lund_seg1")]
    for bad in ("anchor", "a/b", "x\n"):
        with pytest.raises(EvaluationError, match="extra condition"):
            read_generated_folder(tmp_path, demo, extra_conditions=[bad])


# -- names and indices ---------------------------------------------------------------------------------


@pytest.mark.parametrize("names", [("00.jpg", "00.png"), ("00.jpg", "000.jpg"), ("01.JPG", "1000.webp", "001.jpeg")])
def test_two_files_with_one_index_are_refused_naming_both(demo, tmp_path, names):
    folder = _write_panel(tmp_path, "m", "L0", "lund_seg1", demo.world[0].image_bytes, names=("05.jpg", *names))
    msg = _problems(tmp_path, demo)
    same = sorted(n for n in names if int(n.split(".")[0]) == int(names[0].split(".")[0]))
    assert f"{folder}: {' and '.join(same)} have the same index" in msg


@pytest.mark.parametrize("method, block, name, expected", [
    ("m", "lund_seg1", "00.jpg\n", "not a panel image"),  # trailing newline in a file name
    ("m", "lund_seg1", "\u0660\u0661.jpg", "not a panel image"),  # Arabic-Indic digits
    ("m", "lund_seg1", "\uff10\uff11.jpg", "not a panel image"),  # full-width digits
    ("m\n", "lund_seg1", "01.jpg", "unsafe method folder name"),
    ("m", "lund_seg1\n", "01.jpg", "unknown block id 'lund_seg1\\n' (did you mean 'lund_seg1'?)"),
])
def test_names_are_matched_whole_and_ascii(demo, tmp_path, method, block, name, expected):
    img = demo.world[0].image_bytes
    _write_panel(tmp_path, method, "L0", block, img, names=("00.jpg", name) if name != "01.jpg" else ("00.jpg", "01.jpg"))
    assert expected in _problems(tmp_path, demo)


def test_block_typo_gets_did_you_mean(demo, tmp_path):
    _write_panel(tmp_path, "m", "L0", "berlin_am_lustgartn", demo.world[0].image_bytes)
    msg = _problems(tmp_path, demo)
    assert "unknown block id 'berlin_am_lustgartn' (did you mean 'berlin_am_lustgarten'?)" in msg


# -- the generation manifest ---------------------------------------------------------------------------


def test_a_clean_generation_folder_passes_the_manifest_check(demo, tmp_path):
    _generate(demo, tmp_path)
    panels = read_generated_folder(tmp_path, demo)
    assert sorted(panels) == [("painter", "L0", "berlin_am_lustgarten"), ("painter", "L0", "lund_seg1")]


def test_images_the_manifest_does_not_list_are_refused(demo, tmp_path):
    _generate(demo, tmp_path)
    panel = tmp_path / "painter" / "L0" / "lund_seg1"
    (panel / "02.jpg").write_bytes(demo.world[0].image_bytes)  # added by hand
    other = tmp_path / "painter" / "L0" / "berlin_am_lustgarten" / "01.jpg"
    other.write_bytes(demo.world[1].image_bytes)  # replaced by hand
    msg = _problems(tmp_path, demo)
    assert "panel painter/L0/lund_seg1: 02.jpg not listed in manifest.parquet" in msg
    assert "panel painter/L0/berlin_am_lustgarten: 01.jpg not listed in manifest.parquet" in msg
    assert "--ignore-manifest" in msg
    panels = read_generated_folder(tmp_path, demo, ignore_manifest=True)
    assert len(panels[("painter", "L0", "lund_seg1")]) == 3


def _set_manifest(root: Path, where, **values) -> None:
    table = pq.read_table(root / MANIFEST_FILE)
    rows = table.to_pylist()
    for row in rows:
        if where(row):
            row.update(values)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), root / MANIFEST_FILE)


def test_a_panel_made_with_other_settings_is_refused(demo, tmp_path):
    _generate(demo, tmp_path)
    # One block regenerated with more steps (what a partial re-run with --steps --overwrite leaves behind).
    _generate(demo, tmp_path, blocks=["berlin_am_lustgarten"], spec=_spec(steps=5), overwrite=True)
    _generate(demo, tmp_path, blocks=["arezzo_park_path"])
    msg = _problems(tmp_path, demo)
    assert ("panel painter/L0/berlin_am_lustgarten: made with steps=5, while 2 other panel(s) of painter were made "
            "with steps=1") in msg
    assert "lund_seg1" not in msg


def test_a_panel_mixing_settings_and_a_broken_seed_rule_is_refused(demo, tmp_path):
    _generate(demo, tmp_path)
    _set_manifest(tmp_path, lambda r: r["block_id"] == "lund_seg1" and r["k"] == 1, guidance=7.5, seed=12345)
    msg = _problems(tmp_path, demo)
    assert "panel painter/L0/lund_seg1: its images were made with different settings (guidance=" in msg
    assert "panel painter/L0/lund_seg1: 01.jpg (seed 12345) not made with the seed of its unit" in msg


def test_evaluate_cli_ignore_manifest_and_extra_conditions_are_recorded(demo, tmp_path, capsys):
    gen = tmp_path / "gen"
    _generate(demo, gen, blocks=["lund_seg1"])
    (gen / "painter" / "L0" / "lund_seg1" / "02.jpg").write_bytes(demo.world[0].image_bytes)
    _write_panel(gen, "painter", "MY_STYLE", "lund_seg1", demo.world[1].image_bytes)
    (gen / "painter" / "MY_STYLE" / "lund_seg1" / "01.jpg").write_bytes(demo.world[2].image_bytes)
    base = ["evaluate", "--generated", str(gen), "--encoder", "efficientnet-lite0", "--no-anchors",
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "unknown condition 'MY_STYLE'" in err and "Traceback" not in err
    assert main([*base, "--extra-conditions", "MY_STYLE", "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "panel painter/L0/lund_seg1: 02.jpg not listed in manifest.parquet" in err
    assert "panel painter/MY_STYLE/lund_seg1: 00.jpg, 01.jpg not listed" in err and "unknown condition" not in err
    out = tmp_path / "out"
    assert main([*base, "--extra-conditions", "MY_STYLE", "--ignore-manifest", "--out", str(out)]) == 0
    assert "warning: --ignore-manifest: panel painter/L0/lund_seg1: 02.jpg" in capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["generation_manifest"]["ignored"] is True and run["generation_manifest"]["checked"] is False
    assert any("02.jpg" in p for p in run["generation_manifest"]["ignored_problems"])
    assert run["extra_conditions"] == ["MY_STYLE"]
    # The extra condition's rows are never dropped by the report.
    assert main(["report", "--results", str(out), "--out", str(tmp_path / "report"), "--no-plots",
                 "--n-resamples", "50", "--rank-resamples", "20"]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Extra conditions" in report and "MY_STYLE" in report


# -- generate into a folder made with other settings ---------------------------------------------------


def test_generate_refuses_other_settings_unless_overwrite(demo, tmp_path):
    _generate(demo, tmp_path)
    before = {p: file_sha256(p) for p in tmp_path.rglob("*.jpg")}
    with pytest.raises(GenerationFolderError) as info:
        _generate(demo, tmp_path, spec=_spec(steps=3, guidance=2.0))
    msg = str(info.value)
    assert "4 image(s) were made with other settings" in msg
    assert "painter/L0/lund_seg1/00.jpg (differs in steps, guidance)" in msg and "--overwrite" in msg
    assert {p: file_sha256(p) for p in tmp_path.rglob("*.jpg")} == before  # nothing touched
    s = _generate(demo, tmp_path, spec=_spec(steps=3, guidance=2.0), overwrite=True)
    assert s.generated == 4
    df = load_manifest(tmp_path)
    assert len(df) == 4 and set(df.steps) == {3} and set(df.guidance) == {2.0}


def test_generate_with_fewer_images_per_block_reports_the_stale_files(demo, tmp_path):
    _generate(demo, tmp_path, n=3)
    with pytest.raises(GenerationFolderError) as info:
        _generate(demo, tmp_path, n=2)
    msg = str(info.value)
    assert "2 image(s) are beyond --images-per-block" in msg
    assert "painter/L0/lund_seg1/02.jpg" in msg and "painter/L0/berlin_am_lustgarten/02.jpg" in msg
    assert (tmp_path / "painter/L0/lund_seg1/02.jpg").is_file()
    s = _generate(demo, tmp_path, n=2, overwrite=True)
    assert s.generated == 0 and s.skipped == 4
    assert not (tmp_path / "painter/L0/lund_seg1/02.jpg").exists()
    assert len(load_manifest(tmp_path)) == 4
    panels = read_generated_folder(tmp_path, demo)
    assert [p.name for p in panels[("painter", "L0", "lund_seg1")]] == ["00.jpg", "01.jpg"]


def test_generate_cli_refuses_other_settings(tmp_path, capsys):
    args = ["generate", "--plugin", str(PLUGIN), "--model", "coords", "--conditions", "L0", "--blocks", "lund_seg1",
            "--images-per-block", "2", "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "coords/L0/lund_seg1/00.jpg (differs in steps)" in err and "--overwrite" in err and "Traceback" not in err
    assert main([*args, "--steps", "2", "--overwrite"]) == 0
    assert set(load_manifest(tmp_path).steps) == {2}


# -- issue 29: panels made for another benchmark; every problem of every kind at once ---------------


def test_panels_made_for_another_benchmark_are_refused_naming_both_fingerprints(demo, tmp_path):
    from geofidelity_bench.generated_folder import check_generation_manifest

    _generate(demo, tmp_path)
    other = "f" * 64
    _set_manifest(tmp_path, lambda r: r["block_id"] == "lund_seg1", benchmark_fingerprint=other)
    msg = _problems(tmp_path, demo)
    assert ("panel painter/L0/lund_seg1: 00.jpg, 01.jpg made for another benchmark (fingerprint " + other) in msg
    assert f"the benchmark scored has fingerprint {demo.fingerprint}" in msg
    assert "berlin_am_lustgarten" not in msg and "--ignore-manifest" in msg
    # --ignore-manifest lets them through; what it ignored is what run.json records (ignored_problems)
    panels = read_generated_folder(tmp_path, demo, ignore_manifest=True)
    ignored = check_generation_manifest(tmp_path, panels, benchmark_fingerprint=demo.fingerprint).problems
    assert len(ignored) == 1 and other in ignored[0] and demo.fingerprint in ignored[0]


def test_every_problem_of_a_generated_folder_is_reported_at_once(demo, tmp_path, capsys):
    """Today the layout problem came first, the undecodable image and the unpromptable panel only after a fix."""
    from geofidelity_bench.evaluation import load_generated_panels

    good = demo.world[0].image_bytes
    root = tmp_path / "gen"
    _write_panel(root, "m", "l1", "lund_seg1", good)  # a layout problem: an unknown condition
    bad = _write_panel(root, "m", "L0", "lund_seg1", good)
    (bad / "01.jpg").write_bytes(b"\xff\xd8 not really a jpeg")  # an undecodable image
    _write_panel(root, "m", "L1", "lund_seg1", good)  # a block without a street name: no L1 prompt
    _write_panel(root, "heldout_real", "L0", "lund_seg2", good)  # a reserved method name
    with pytest.raises(EvaluationError) as err:
        load_generated_panels(root, demo)
    msg = str(err.value)
    assert "4 problem(s)" in msg
    assert "unknown condition 'l1'" in msg and "method name 'heldout_real' is reserved" in msg
    assert str(bad / "01.jpg") in msg and "no prompt could have produced panel L1/lund_seg1 (method m)" in msg
    assert "--skip-bad-images" in msg and "--allow-unpromptable" in msg
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(root), "--out", str(out), "--encoder",
                 "efficientnet-lite0", "--no-progress"]) == 2
    printed = capsys.readouterr().err
    assert "unknown condition 'l1'" in printed and str(bad / "01.jpg") in printed and "Traceback" not in printed
    assert not out.exists()


def test_only_undecodable_images_keep_their_own_error(demo, tmp_path):
    from geofidelity_bench.evaluation import load_generated_panels
    from geofidelity_bench.panel_images import BadImagesError

    bad = _write_panel(tmp_path, "m", "L0", "lund_seg1", demo.world[0].image_bytes)
    (bad / "00.jpg").write_bytes(b"garbage")
    with pytest.raises(BadImagesError, match=r"1 generated image\(s\) cannot be decoded"):
        load_generated_panels(tmp_path, demo)
    loaded = load_generated_panels(tmp_path, demo, skip_bad_images=True)
    assert loaded.image_check.too_small == {("m", "L0", "lund_seg1"): 1}
    assert [r["file"] for r in loaded.image_check.skipped] == [str(bad / "00.jpg")]


def test_a_long_list_of_folder_problems_is_cut_at_50_with_a_count(demo, tmp_path):
    for i in range(55):
        _write_panel(tmp_path, "m", "L0", f"nowhere_{i:02d}", demo.world[0].image_bytes)
    msg = _problems(tmp_path, demo)
    assert "55 problem(s)" in msg and "... and 5 more" in msg and "nowhere_49" in msg and "nowhere_50" not in msg
