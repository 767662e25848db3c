"""import-release: the published v3.1.0 layout (a synthetic fixture) -> the canonical format."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from geofidelity_bench import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import read_generated_folder
from geofidelity_bench.prompts import NEGATIVE_PROMPT
from geofidelity_bench.results import read_results_csv
from geofidelity_bench.release_import import (
    ReleaseImportError,
    canonical_block_id,
    import_release,
    map_level,
    map_negative_column,
    release_seed,
)

FIXTURE = Path(__file__).resolve().parent / "data" / "release_fixture" / "make_fixture.py"


def _fixture_module():
    spec = importlib.util.spec_from_file_location("geofidelity_release_fixture", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fx = _fixture_module()
TOKYO = canonical_block_id(fx.B_TOKYO)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    fx.write_release_fixture(root)
    return root


@pytest.fixture(scope="module")
def imported(release, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    report = import_release(release, out, log=lambda m: None)
    return out, report


def _issues(report, kind):
    return [i for i in report.issues if i.kind == kind]


def test_aliases_and_safe_ids():
    assert [map_level(x) for x in ("L0", "l1", "L2", "L3", "GPS", "gps-only", "C_SHUFFLED_NBHD", "c wrong street",
                                   "C_WRONG_STREET_NEIGHBORHOOD", "L9_STYLE", None)] == [
        "L0", "L1", "L2", "L2", "GPS_ONLY", "GPS_ONLY", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET",
        "C_WRONG_STREET_NEIGHBORHOOD", None, None]
    assert [map_negative_column(c) for c in ("neg_same_neighborhood_diff_block", "neg_near", "neg_far",
                                             "NEG_SAME_CITY_DIFF_NEIGHBORHOOD", "neg_same_driving_side_diff_city",
                                             "neg_random_city", "neg_same_climate")] == [
        "same_neighborhood", "same_neighborhood", "same_city", "same_city", "same_driving_side", "random_city", None]
    assert canonical_block_id(fx.B_RIVOLI) == fx.B_RIVOLI
    assert TOKYO == canonical_block_id(fx.B_TOKYO) and TOKYO.startswith("tokyo__pedestrian__2001-")
    assert canonical_block_id("tokyo__pedestrian__2001__仲見世") != TOKYO


def test_blocks_references_and_negatives(imported):
    out, report = imported
    bench = load_benchmark(out / "benchmark")
    assert bench.block_ids == sorted([fx.B_OBERKAMPF, fx.B_RIVOLI, TOKYO])
    assert len(bench.references) == fx.EXPECTED["references_imported"] == report.counts["references"]
    assert len({r.image_id for r in bench.references}) == fx.EXPECTED["distinct_images"]
    assert report.block_id_map == {fx.B_TOKYO: TOKYO}

    rivoli, tokyo = bench.block(fx.B_RIVOLI), bench.block(TOKYO)
    assert (rivoli.city, rivoli.country, rivoli.driving_side, rivoli.stratum) == ("paris", "FR", "R", "major")
    assert rivoli.way_id == 1001 and rivoli.street_name == "Rue de Rivoli" and len(rivoli.polyline) == 3
    assert tokyo.driving_side == "L" and tokyo.street_name == "仲見世通り" and fx.B_TOKYO in tokyo.notes
    # Release negative names mapped to ours; benchmark_v3.json wins a disagreement; a negative to the
    # dropped London block becomes null.
    assert bench.negatives(fx.B_RIVOLI) == {"same_neighborhood": fx.B_OBERKAMPF, "same_city": fx.B_OBERKAMPF,
                                            "same_driving_side": None, "random_city": TOKYO}
    assert bench.negatives(fx.B_OBERKAMPF)["random_city"] == TOKYO
    assert bench.negatives(TOKYO) == {"same_neighborhood": None, "same_city": None, "same_driving_side": None,
                                      "random_city": fx.B_RIVOLI}

    # Capture metadata from the JSON, license/attribution defaults, the Windows path relocated.
    ref = bench.references_of(fx.B_RIVOLI)[0]
    assert ref.sun_elevation_deg == 35.5 and ref.camera_type == "perspective" and ref.quality_score == 0.75
    assert ref.captured_at > 1_650_000_000_000 and ref.source_url.startswith("https://www.mapillary.com/")
    assert ref.license == "CC-BY-SA-4.0" and ref.attribution == f"Mapillary contributors (image {ref.image_id})"
    assert len(bench.references_of(TOKYO)) == 4

    # The held-out split works: disjoint, k = max(1, min(4, n // 2)), galleries of >= 2.
    for block_id in bench.block_ids:
        held, gallery = bench.heldout(block_id), bench.gallery(block_id)
        n = len(bench.references_of(block_id))
        assert len(held) == max(1, min(4, n // 2)) and len(gallery) >= 2
        assert not {r.reference_id for r in held} & {r.reference_id for r in gallery}


def test_generated_panels_are_evaluable_with_provenance(imported):
    out, report = imported
    bench = load_benchmark(out / "benchmark")
    panels = read_generated_folder(out / "generations", bench)
    assert len(panels) == 2 * 6 * 3 and all(len(files) == 2 for files in panels.values())
    assert {m for m, _, _ in panels} == {"sdxl", "flux_schnell"}
    assert {c for _, c, _ in panels} == {"L0", "L1", "L2", "C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD",
                                         "C_WRONG_STREET_NEIGHBORHOOD"}
    assert report.model_map == {"flux_schnell": "flux_schnell", "sdxl_base": "sdxl"}
    assert report.level_map["C_SHUFFLED_NBHD"] == "C_SHUFFLED_NEIGHBORHOOD"

    manifest = pd.read_parquet(out / "generations" / "manifest.parquet")
    assert len(manifest) == fx.EXPECTED["generated_images"] == report.counts["generated_images"]
    row = lambda m, c, b, k: manifest[(manifest.model == m) & (manifest.condition == c) & (manifest.block_id == b)
                                      & (manifest.k == k)].iloc[0]
    # Seeds: exact values recomputed from the float-rounded column (L2 was generated as "L3"), blank for L0.
    assert row("sdxl", "L1", fx.B_RIVOLI, 1).seed == release_seed("sdxl_base", fx.B_RIVOLI, "L1", 1)
    assert row("sdxl", "L2", TOKYO, 0).seed == release_seed("sdxl_base", fx.B_TOKYO, "L3", 0)
    assert pd.isna(row("sdxl", "L0", fx.B_RIVOLI, 0).seed)
    m, level, block, k = fx.EXPECTED["unverified_seed"]
    assert pd.isna(row(m, level, canonical_block_id(block), k).seed)
    assert report.counts["seeds_unverified"] == 1 and report.counts["seeds_missing"] == 12
    # Donors from prompt_meta, or from prompt_controls.csv when prompt_meta has none; ids are ours.
    assert row("sdxl", "C_WRONG_STREET", fx.B_RIVOLI, 0).street_donor == fx.B_OBERKAMPF
    assert row("flux_schnell", "C_SHUFFLED_NEIGHBORHOOD", TOKYO, 0).neighborhood_donor == fx.B_RIVOLI
    both = row("sdxl", "C_WRONG_STREET_NEIGHBORHOOD", TOKYO, 1)
    assert both.street_donor == both.neighborhood_donor == fx.B_RIVOLI
    # Generation settings of known models; FLUX takes no negative prompt.
    sdxl = row("sdxl", "L1", fx.B_RIVOLI, 0)
    assert sdxl.weights == "stabilityai/stable-diffusion-xl-base-1.0" and sdxl.negative_prompt == NEGATIVE_PROMPT
    assert pd.isna(row("flux_schnell", "L1", fx.B_RIVOLI, 0).negative_prompt)
    assert sdxl.prompt.startswith("A street-level photograph taken on Rue de Rivoli")
    assert (sdxl.benchmark_fingerprint, sdxl.benchmark) == (bench.fingerprint, "GeoFidelity-Bench v3.1.0 (imported)")

    # Every copied image keeps the release's names beside it.
    with open(out / "generations" / "release_index.csv", newline="", encoding="utf-8") as fh:
        index = {r["path"]: r for r in csv.DictReader(fh)}
    entry = index[f"sdxl/C_SHUFFLED_NEIGHBORHOOD/{TOKYO}/00.jpg"]
    assert (entry["release_model"], entry["release_level"], entry["release_block_id"]) == (
        "sdxl_base", "C_SHUFFLED_NBHD", fx.B_TOKYO)


def test_nothing_is_dropped_silently(imported):
    out, report = imported
    saved = json.loads((out / "import_report.json").read_text(encoding="utf-8"))
    assert saved["issue_counts"] == report.issue_counts
    unmapped = _issues(report, "unmapped_level")
    assert len(unmapped) == 2 and all(i.values["level"] == "L9_STYLE" and i.action == "skipped" for i in unmapped)
    assert all(i.file == "metadata/generated_images.csv" and i.line for i in unmapped)
    unknown = _issues(report, "unknown_block")
    assert any(i.file == "metadata/reference_images.csv" and i.values["block_id"] == fx.B_ROME for i in unknown)
    assert sum(i.values.get("block_id") == fx.B_LONDON for i in unknown) == 2  # panels of the dropped block
    assert [i.values["block_id"] for i in _issues(report, "too_few_references")] == [fx.B_LONDON]
    assert [i.values["block_id"] for i in _issues(report, "block_not_in_blocks_csv")] == [fx.B_ROME]
    assert len(_issues(report, "missing_image")) == 1
    assert [i.values["column"] for i in _issues(report, "unmapped_negative_column")] == ["neg_same_climate"]
    assert len(_issues(report, "negative_conflict")) == 1
    assert {i.values["negative"] for i in _issues(report, "dangling_negative")} == {fx.B_LONDON}
    assert len(_issues(report, "panel_too_small")) == 1
    assert len(_issues(report, "seed_unverified")) == 1


def test_cli_prints_the_summary_and_strict_fails(release, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["import-release", str(release), "--out", str(out), "--no-generations"]) == 0
    text = capsys.readouterr().out
    assert "3 blocks in 2 cities" in text and "unknown_block (1)" in text and "import_report.json" in text
    assert main(["import-release", str(release), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["import-release", str(release), "--out", str(out), "--overwrite", "--strict"]) == 1
    text = capsys.readouterr().out
    assert "unmapped_level (2)" in text and "L9_STYLE" in text and "panel_too_small (1)" in text


def _rewrite_csv(path: Path, drop: list[str]) -> None:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    header = [c for c in rows[0] if c not in drop]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def test_missing_columns(release, tmp_path, capsys):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    # Optional columns missing: nulls, no error.
    _rewrite_csv(copy / "metadata/reference_images.csv", ["captured_at_utc_ms", "mapillary_url", "image_url", "lat"])
    (copy / "data/processed/v3/benchmark_v3.json").unlink()
    report = import_release(copy, tmp_path / "ok", generations=False, log=lambda m: None)
    bench = load_benchmark(tmp_path / "ok" / "benchmark")
    ref = bench.references[0]
    assert ref.captured_at is None and ref.source_url is None and ref.lat is None and ref.sun_elevation_deg is None
    assert _issues(report, "missing_optional_file")
    # Required column missing: a clear error naming the file and the column.
    _rewrite_csv(copy / "metadata/reference_images.csv", ["block_id"])
    with pytest.raises(ReleaseImportError, match=r"metadata/reference_images\.csv: missing required column 'block_id'"):
        import_release(copy, tmp_path / "bad", log=lambda m: None)
    _rewrite_csv(copy / "metadata/blocks.csv", ["driving_side"])
    assert main(["import-release", str(copy), "--out", str(tmp_path / "bad2")]) == 2
    err = capsys.readouterr().err
    assert "metadata/blocks.csv" in err and "'driving_side'" in err and "Traceback" not in err
    (copy / "metadata/blocks.csv").unlink()
    with pytest.raises(ReleaseImportError, match="missing required file metadata/blocks.csv"):
        import_release(copy, tmp_path / "bad3", log=lambda m: None)


def test_build_dataset_from_the_imported_release(imported, tmp_path):
    import datasets

    out, report = imported
    hub_dir = tmp_path / "hub"
    assert main(["build-dataset", str(out), "--out", str(hub_dir)]) == 0
    gens = datasets.load_dataset(str(hub_dir), "generations", split="train", cache_dir=str(tmp_path / "cache"))
    assert len(gens) == report.counts["generated_images"] and gens[0]["image"].size == (32, 24)
    assert load_benchmark(hub_dir).fingerprint == load_benchmark(out / "benchmark").fingerprint


def _edit_csv(path: Path, edit) -> None:
    """Rewrites a CSV of the release fixture, ``edit(rows)`` changing the row dicts in place."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    edit(rows)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_image_paths_outside_the_release_are_issues_never_read(release, tmp_path):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    outside = tmp_path / "private.jpg"  # a valid image outside the release: today it is read and imported
    shutil.copyfile(next((copy / "data/raw/mapillary_v3").rglob("*.jpg")), outside)
    linked = tmp_path / "linked.jpg"
    shutil.copyfile(outside, linked)
    chosen = {}

    def refs(rows):
        rivoli = [r for r in rows if r["block_id"] == fx.B_RIVOLI]  # 5 references: 3 stay
        rivoli[0]["image_path"] = str(outside)  # absolute
        rivoli[1]["image_path"] = "../private.jpg"  # climbs out
        # a file inside the release that is a link to a file outside it
        oberkampf = next(r for r in rows if r["block_id"] == fx.B_OBERKAMPF)
        link = copy / "data/raw/mapillary_v3" / fx.B_OBERKAMPF / "link.jpg"
        link.symlink_to(linked)
        oberkampf["image_path"] = f"data/raw/mapillary_v3/{fx.B_OBERKAMPF}/link.jpg"
        chosen["refs"] = [rivoli[0]["reference_id"], rivoli[1]["reference_id"], oberkampf["reference_id"]]

    def gens(rows):
        row = next(r for r in rows if r["block_id"] == fx.B_RIVOLI and r["level"] == "L1")
        row["image_path"] = "../../private.jpg"
        chosen["gen"] = (row["model"], row["level"])

    _edit_csv(copy / "metadata/reference_images.csv", refs)
    _edit_csv(copy / "metadata/generated_images.csv", gens)
    report = import_release(copy, tmp_path / "out", log=lambda m: None)
    issues = _issues(report, "path_outside_release")
    by_ref = {i.values.get("reference_id"): i for i in issues if i.file == "metadata/reference_images.csv"}
    assert sorted(by_ref) == sorted(chosen["refs"])
    assert all(i.action == "skipped" and "outside the release folder" in i.reason for i in by_ref.values())
    assert str(outside) in by_ref[chosen["refs"][0]].reason and "../private.jpg" in by_ref[chosen["refs"][1]].reason
    gen_issues = [i for i in issues if i.file == "metadata/generated_images.csv"]
    assert len(gen_issues) == 1 and gen_issues[0].values["image_path"] == "../../private.jpg"
    assert (gen_issues[0].values["model"], gen_issues[0].values["level"]) == chosen["gen"]
    bench = load_benchmark(tmp_path / "out" / "benchmark")
    assert not set(chosen["refs"]) & {r.reference_id for r in bench.references}
    saved = json.loads((tmp_path / "out" / "import_report.json").read_text(encoding="utf-8"))
    assert saved["issue_counts"]["path_outside_release"] == 4


def test_a_csv_that_is_not_utf8_is_a_clean_error(release, tmp_path, capsys):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    path = copy / "metadata/blocks.csv"
    data = path.read_bytes()
    assert "é".encode() in data
    path.write_bytes(data.replace("é".encode(), "é".encode("cp1252")))  # as a Windows editor saves it
    with pytest.raises(ReleaseImportError, match=r"metadata/blocks\.csv: not UTF-8 text .*save it as UTF-8"):
        import_release(copy, tmp_path / "out", log=lambda m: None)
    assert main(["import-release", str(copy), "--out", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert "metadata/blocks.csv: not UTF-8" in err and "Traceback" not in err


def test_a_csv_field_over_the_csv_limit_is_one_line_and_nothing_written(release, tmp_path, capsys):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)

    def huge(rows):
        rows[1]["image_path"] = "x" * (csv.field_size_limit() + 10)

    _edit_csv(copy / "metadata/generated_images.csv", huge)
    out = tmp_path / "out"
    assert main(["import-release", str(copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert ("metadata/generated_images.csv: the row after line 2 cannot be read as CSV (field larger than field "
            f"limit ({csv.field_size_limit()}); the limit is {csv.field_size_limit():,} characters") in lines[0]
    assert not (out / "benchmark").exists() and not (out / "generations").exists()


def test_a_sample_index_of_1e400_or_1e300_is_an_issue_not_a_traceback(release, tmp_path):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    chosen = []

    def indices(rows):
        for row, value in zip(rows[:3], ("1e400", "1e300", "-inf")):
            row["sample_index"] = value
            chosen.append((row["model"], row["level"], row["block_id"], value))

    _edit_csv(copy / "metadata/generated_images.csv", indices)
    report = import_release(copy, tmp_path / "out", log=lambda m: None)
    bad = [i for i in _issues(report, "bad_value") if i.file == "metadata/generated_images.csv"]
    got = sorted((i.values["sample_index"], i.action, i.reason) for i in bad)
    assert got == [("-inf", "skipped", "sample_index='-inf' is not an integer"),
                   ("1e300", "skipped", "sample_index '1e300' is over 9999"),
                   ("1e400", "skipped", "sample_index='1e400' is not an integer")]
    names = [p.name for p in (tmp_path / "out" / "generations").rglob("*.jpg")]
    assert names and max(len(n) for n in names) <= len("9999.jpg")


# --- the fixture's command line and the README's offline walk ------------------------------------------


def test_the_fixture_script_writes_published_scores_only_with_published(tmp_path, capsys):
    assert fx.main([str(tmp_path / "plain")]) == 0
    assert fx.main([str(tmp_path / "pub"), "--published"]) == 0
    out = capsys.readouterr().out
    assert "without published scores" in out and "with published scores" in out
    for name in ("plain", "pub"):
        assert (tmp_path / name / "metadata" / "blocks.csv").is_file()
        assert "invented" in (tmp_path / name / fx.MARKER).read_text(encoding="utf-8")
    assert not (tmp_path / "plain" / "outputs").exists()
    assert (tmp_path / "pub" / "outputs" / "eval_v3" / "raw_results.csv").is_file()
    # what the script writes is what the tests' write_release_fixture(published=True) writes, plus the marker
    direct = tmp_path / "direct"
    fx.write_release_fixture(direct, published=True)
    files = {p.relative_to(tmp_path / "pub") for p in (tmp_path / "pub").rglob("*") if p.is_file()}
    assert files - {Path(fx.MARKER)} == {p.relative_to(direct) for p in direct.rglob("*") if p.is_file()}


def test_the_fixture_script_refuses_a_folder_that_is_not_its_own(tmp_path, capsys):
    real = tmp_path / "release"
    (real / "metadata").mkdir(parents=True)
    (real / "metadata" / "blocks.csv").write_text("a real download\n")
    for argv in ([str(real)], [str(real), "--overwrite"]):
        with pytest.raises(SystemExit) as exc:
            fx.main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and f"has no {fx.MARKER}" in err
    assert (real / "metadata" / "blocks.csv").read_text() == "a real download\n"  # left alone
    ours = tmp_path / "ours"
    assert fx.main([str(ours)]) == 0
    with pytest.raises(SystemExit):
        fx.main([str(ours), "--published"])
    assert fx.main([str(ours), "--published", "--overwrite"]) == 0
    assert (ours / "outputs" / "eval_v3" / "raw_results.csv").is_file()


def _readme_offline_walk() -> list[str]:
    """The README's offline walk of "Reproducing the paper": the indented block that starts with make_fixture.py."""
    lines = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("    python tests/data/release_fixture/make_fixture.py"))
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line.strip())
    return block


def test_the_readmes_offline_reproduce_walk_runs_as_written(tmp_path):
    """Each command of the block, as the README writes it, in an empty folder that sees the repository's
    tests/ (the README runs it from the repository root), offline, with this environment's
    ``python`` and ``geofidelity-bench``."""
    import os
    import subprocess

    walk = _readme_offline_walk()
    assert "--published" in walk[0] and any(c.startswith("geofidelity-bench import-release") for c in walk)
    assert any(c.startswith("geofidelity-bench compare") for c in walk)
    work = tmp_path / "work"
    work.mkdir()
    (work / "tests").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "geofidelity-bench").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m geofidelity_bench.cli "$@"\n')
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               GEOFIDELITY_CACHE=str(tmp_path / "cache"), MPLBACKEND="Agg",
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    outputs = {}
    for command in walk:
        run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{command}\n--- stdout\n{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}"
        outputs[command.split()[1]] = run.stdout + run.stderr
    folders = {p.name for p in work.iterdir()} - {"tests"}
    assert folders == {"fixture_release", "fixture_out", "fixture_rerun"}, folders
    published = work / "fixture_out" / "published"
    rows = pd.read_csv(published / "results.csv")
    assert {"heldout_real", "sdxl", "flux_schnell"} <= set(rows["method"])  # the release's scores, imported
    assert (published / "report" / "report.md").is_file()
    assert (work / "fixture_rerun" / "results.csv").is_file()
    compared = outputs["compare"]
    assert "DIFFERENT ENCODERS" in compared and "Rows on one side only" in compared, compared[-2000:]


# --- published counts: a count is a whole number from 0 to MAX_COUNT (issue 43) -------------------------


@pytest.fixture(scope="module")
def published_release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release_published_counts")
    fx.write_release_fixture(root, published=True)
    return root


@pytest.mark.parametrize("column, value", [
    ("n_gen", "1e300"), ("n_gen", "1000001"), ("n_gen", "2.5"), ("n_gen", "-1"), ("n_gen", "inf"),
    ("n_ref", "1e300"), ("n_ref", "10000000"),
])
def test_a_published_count_that_is_not_a_sane_whole_number_is_an_issue(published_release, tmp_path, capsys,
                                                                      column, value):
    copy = tmp_path / "release"
    shutil.copytree(published_release, copy)
    raw = "outputs/eval_v3/raw_results.csv"
    picked = {}

    def edit(rows):
        i, row = next((i, r) for i, r in enumerate(rows) if r["method"] == "sdxl_base" and "paris" in r["block_id"])
        row[column] = value
        picked.update(line=i + 2, block=row["block_id"])

    _edit_csv(copy / raw, edit)
    out = tmp_path / "out"
    assert main(["import-release", str(copy), "--out", str(out), "--no-generations"]) == 0
    capsys.readouterr()
    saved = json.loads((out / "import_report.json").read_text(encoding="utf-8"))
    bad = [i for i in saved["issues"] if i["kind"] == "bad_value" and i["file"] == raw]
    assert len(bad) == 1, bad
    assert bad[0]["line"] == picked["line"] and bad[0]["values"]["column"] == column
    assert bad[0]["values"]["value"] == value and bad[0]["action"] == "set to NaN"
    assert f"{column}={value!r}" in bad[0]["reason"]
    df = read_results_csv(out / "published" / "results.csv")
    ours = "n_generated" if column == "n_gen" else "n_reference"
    assert df[ours].dropna().le(10**6).all() and df[ours].isna().sum() == 1


def test_a_published_count_at_the_bound_is_kept(published_release, tmp_path):
    from geofidelity_bench.release_import.published import MAX_COUNT

    copy = tmp_path / "release"
    shutil.copytree(published_release, copy)

    def edit(rows):
        next(r for r in rows if r["method"] == "sdxl_base" and "paris" in r["block_id"])["n_gen"] = f"{MAX_COUNT}.0"

    _edit_csv(copy / "outputs/eval_v3/raw_results.csv", edit)
    report = import_release(copy, tmp_path / "out", generations=False, log=lambda m: None)
    assert not [i for i in _issues(report, "bad_value") if i.values.get("column") == "n_gen"]
