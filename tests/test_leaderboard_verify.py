"""A leaderboard that trusts nothing a submitter writes (docs/benchmark.md section 13), end to end
against the loopback fake Hub: `leaderboard init` on the demo (the offline encoder), a tiny
generator's panels pushed with `push-generations`, `push-results --generations`, and `leaderboard
verify` re-computing every number from the pushed images; then a hostile submitter's edits."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

try:
    from fake_hub import FakeHub
    from test_generation_hub import TOKEN
except ImportError:  # tests/ imported as a package
    from tests.fake_hub import FakeHub
    from tests.test_generation_hub import TOKEN
from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.hub.leaderboard import commit_checked, read_config
from geofidelity_bench.hub.leaderboard_config import LEADERBOARD_FILE
from geofidelity_bench.hub.push import HubRepo
from geofidelity_bench.hub.results_repo import SubmissionError, load_submissions, push_results
from geofidelity_bench.hub.verify import VERIFY_ATOL, VERIFY_RTOL, verification_paths

REPO, GENS = "tester/lb", "tester/gens"
BLOCKS = ("arezzo_park_path", "lund_seg1")
ENCODER = "efficientnet-lite0"


@pytest.fixture(scope="module")
def lb(tmp_path_factory):
    """A pinned results repo on a fake Hub with one honest submission (tiny generator, 2 blocks of L0)."""
    try:
        from conftest import demo_lite0_cache
    except ImportError:
        from tests.conftest import demo_lite0_cache
    from huggingface_hub import constants

    root = tmp_path_factory.mktemp("lb")
    cache = shutil.copytree(demo_lite0_cache(tmp_path_factory), root / "cache")
    with pytest.MonkeyPatch.context() as mp, FakeHub(token=TOKEN) as hub:
        mp.setattr(constants, "HF_HUB_OFFLINE", False)
        mp.setenv("HF_TOKEN", TOKEN)
        ep = ["--endpoint", hub.url]
        assert main(["leaderboard", "init", "--repo-id", REPO, "--benchmark", "demo", "--encoder", ENCODER,
                     "--no-progress", "--cache-dir", str(cache), *ep]) == 0
        assert main(["generate", "--model", "tiny", "--conditions", "L0", "--blocks", *BLOCKS, "--images-per-block",
                     "2", "--out", str(root / "gen"), "--no-progress"]) == 0
        evaluate(root / "gen", root / "res", cache)
        assert main(["push-generations", str(root / "gen"), "--repo-id", GENS, *ep]) == 0
        pinned = dict(hub.files("dataset", REPO))
        assert main(["push-results", str(root / "res"), "--repo-id", REPO, "--generations", GENS, *ep]) == 0
        yield {"hub": hub, "root": root, "cache": cache, "ep": ep, "pinned": pinned}


def evaluate(gen: Path, out: Path, cache: Path, *extra: str) -> Path:
    assert main(["evaluate", "--generated", str(gen), "--encoder", ENCODER, "--out", str(out), "--no-progress",
                 "--cache-dir", str(cache), "--no-gaas", *extra]) == 0
    return out


def verify(lb, *extra: str) -> None:
    assert main(["leaderboard", "verify", "--repo-id", REPO, "--no-progress", "--cache-dir", str(lb["cache"]),
                 *lb["ep"], *extra]) == 0


def record_of(lb, method: str, run_id: str) -> dict:
    files = lb["hub"].files("dataset", REPO)
    return json.loads(files[verification_paths(method, run_id)[0]])


def run_id_of_push(capsys, method: str) -> str:
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if f"submitted {method} as run" in x or f"{method} run" in x)
    return line.split(" run ")[1].split()[0]


def copy_results(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def edit_csv(folder: Path, fn) -> None:
    df = pd.read_csv(folder / "results.csv", keep_default_na=False, na_values=[""], dtype={"block_id": str})
    fn(df)
    df.to_csv(folder / "results.csv", index=False)


def panel_of_copies(benchmark, block_id: str, n: int = 2) -> list[bytes]:
    """The benchmark's own photos of a block (a "generator" that copies them)."""
    refs = [r for r in benchmark.references if r.block_id == block_id]
    return [bytes(r.image_bytes) for r in refs[:n]]


def write_panel(folder: Path, method: str, condition: str, block: str, images: list[bytes]) -> None:
    target = folder / method / condition / block
    target.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(images):
        (target / f"{i:02d}.jpg").write_bytes(data)


# -- the honest path ---------------------------------------------------------------------------------


def test_init_pins_the_group_from_the_benchmark_and_writes_the_anchors_itself(lb):
    config, _ = read_config(REPO, endpoint=lb["hub"].url)
    group = config.default
    bench = load_benchmark("demo")
    assert group.benchmark["fingerprint"] == bench.fingerprint and group.encoder["name"] == ENCODER
    # the block set per condition is the benchmark's promptable blocks, not the submissions'
    from geofidelity_bench.prompts import PromptError, build_prompt

    def promptable(cond):
        ok = []
        for b in bench.blocks:
            try:
                build_prompt(bench, b.block_id, cond)
                ok.append(b.block_id)
            except PromptError:
                pass
        return sorted(ok)

    assert group.blocks["L0"] == promptable("L0") and len(group.blocks["L0"]) == 7
    assert group.blocks["L1"] == promptable("L1") == ["berlin_am_lustgarten"]
    anchors = pd.read_csv(io.BytesIO(lb["pinned"][f"anchors/{group.group_id}/results.csv"]))
    assert set(anchors["condition"]) == {"anchor"} and len(anchors) == 3 * 7
    # the honest push wrote nothing under anchors/ and did not touch leaderboard.json
    files = lb["hub"].files("dataset", REPO)
    for path, data in lb["pinned"].items():
        if path.startswith("anchors/") or path == LEADERBOARD_FILE:
            assert files[path] == data
    assert {p for p in files if p.startswith("anchors/")} == {p for p in lb["pinned"] if p.startswith("anchors/")}


def test_an_honest_submission_becomes_verified_and_shows_the_verifiers_numbers(lb):
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    sub = df[df["method"] == "tiny"]
    run_id = str(sub["run_id"].iloc[0])
    if set(sub["verification"]) == {"pending"}:
        assert "self-reported" in sub["verification_detail"].iloc[0]
        verify(lb, "--max", "1")
    rec = record_of(lb, "tiny", run_id)
    assert rec["status"] == "verified", rec["detail"]
    assert rec["generations"]["repo_id"] == GENS and len(rec["generations"]["commit"]) == 40
    verifier_rows = pd.read_csv(io.BytesIO(lb["hub"].files("dataset", REPO)[verification_paths("tiny", run_id)[1]]))
    submitted = pd.read_csv(lb["root"] / "res" / "results.csv")
    submitted = submitted[submitted["method"] == "tiny"].set_index(["condition", "block_id"]).sort_index()
    ours = verifier_rows.set_index(["condition", "block_id"]).sort_index()
    # an independent check of the tolerance: every metric of every panel agrees
    for col in ("cos_sim", "mmd", "dcsf", "retrieval_acc", "mrr", "strongest_margin"):
        a, b = submitted[col].to_numpy(float), ours[col].to_numpy(float)
        assert np.all(np.abs(a - b) <= VERIFY_ATOL + VERIFY_RTOL * np.abs(b)), col
    after, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    shown = after[(after["method"] == "tiny") & (after["run_id"] == run_id)].set_index(["condition", "block_id"])
    assert set(shown["verification"]) == {"verified"}
    np.testing.assert_array_equal(shown.sort_index()["cos_sim"].to_numpy(float), ours["cos_sim"].to_numpy(float))


# -- a hostile submitter -----------------------------------------------------------------------------


def test_an_edited_cos_sim_becomes_mismatch_naming_the_column_and_block(lb, tmp_path, capsys):
    edited = copy_results(lb["root"] / "res", tmp_path / "edited")
    mask_block = "lund_seg1"

    def bump(df):
        m = (df["method"] == "tiny") & (df["block_id"] == mask_block)
        df.loc[m, "cos_sim"] = df.loc[m, "cos_sim"] + 0.05

    edit_csv(edited, bump)
    capsys.readouterr()
    assert main(["push-results", str(edited), "--repo-id", REPO, "--generations", GENS, *lb["ep"]]) == 0
    run_id = run_id_of_push(capsys, "tiny")
    verify(lb)
    rec = record_of(lb, "tiny", run_id)
    assert rec["status"] == "mismatch"
    assert [(d["column"], d["condition"], d["block_id"]) for d in rec["differences"]] == [("cos_sim", "L0", mask_block)]
    assert rec["differences"][0]["abs_diff"] == pytest.approx(0.05, abs=1e-6)
    assert "cos_sim" in rec["detail"] and f"L0/{mask_block}" in rec["detail"]
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    assert set(df.loc[df["run_id"] == run_id, "verification"]) == {"mismatch"}


def test_copies_hidden_by_an_edited_run_json_are_caught_by_the_verifiers_own_audit(lb, tmp_path, capsys):
    bench = load_benchmark("demo")
    gen = tmp_path / "gen"
    for block in BLOCKS:
        write_panel(gen, "copier", "L0", block, panel_of_copies(bench, block))
    res = evaluate(gen, tmp_path / "res", lb["cache"])
    info = json.loads((res / "run.json").read_text())
    assert info["near_copies"], "the audit flags the benchmark's own photos"
    # the hostile edit: no copy anywhere
    info["near_copies"] = []
    for rec in info["copy_audit"]["images"]:
        rec["flagged"] = False
    info["copy_audit"]["n_flagged"] = 0
    (res / "run.json").write_text(json.dumps(info))
    edit_csv(res, lambda df: df.__setitem__("n_copied", np.where(df["condition"] == "anchor", np.nan, 0.0)))
    assert main(["push-generations", str(gen), "--repo-id", "tester/copier-gens", *lb["ep"]]) == 0
    capsys.readouterr()
    assert main(["push-results", str(res), "--repo-id", REPO, "--generations", "tester/copier-gens", *lb["ep"]]) == 0
    run_id = run_id_of_push(capsys, "copier")
    verify(lb)
    rec = record_of(lb, "copier", run_id)
    assert rec["status"] == "mismatch"
    assert rec["copy_audit"]["submitted_flagged"] == 0 and rec["copy_audit"]["verified_flagged"] == 2 * len(BLOCKS)
    assert "copy audit" in rec["detail"]
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    assert set(df.loc[df["run_id"] == run_id, "verification"]) == {"mismatch"}


def test_without_generations_or_with_other_images_a_submission_is_unverifiable(lb, tmp_path, capsys):
    gen = tmp_path / "gen"
    rng = np.random.default_rng(7)
    from PIL import Image

    for block in BLOCKS:
        target = gen / "noisy" / "L0" / block
        target.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(target / f"{i:02d}.png")
    res = evaluate(gen, tmp_path / "res", lb["cache"])
    capsys.readouterr()
    assert main(["push-results", str(res), "--repo-id", REPO, *lb["ep"]]) == 0
    out = capsys.readouterr().out
    assert "self-reported" in out and "never be verified" in out
    run_plain = out.split("submitted noisy as run ")[1].split()[0]
    # the same images re-drawn: the pushed generations are not the images the run scored
    other = tmp_path / "other"
    for block in BLOCKS:
        target = other / "noisy2" / "L0" / block
        target.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(target / f"{i:02d}.png")
    shutil.copytree(other / "noisy2", other / "noisy")
    shutil.rmtree(other / "noisy2")
    assert main(["push-generations", str(other), "--repo-id", "tester/other-gens", *lb["ep"]]) == 0
    res2 = copy_results(res, tmp_path / "res2")
    info = json.loads((res2 / "run.json").read_text())
    info["created_at"] = "2099-01-01T00:00:00+00:00"  # a claim only: never used to order submissions
    (res2 / "run.json").write_text(json.dumps(info))
    capsys.readouterr()
    # the first run again, now with its (wrong) images: its record gains the generations, not a new run
    assert main(["push-results", str(res), "--repo-id", REPO, "--generations", "tester/other-gens", *lb["ep"]]) == 0
    assert "its generations are now recorded" in capsys.readouterr().out
    verify(lb)
    rec = record_of(lb, "noisy", run_plain)
    assert rec["status"] == "unverifiable"
    assert "not those the run scored" in rec["detail"] and "noisy/L0/" in rec["detail"]


def test_push_refuses_an_invented_block_and_a_column_wide_nan_reason(lb, tmp_path):
    invented = copy_results(lb["root"] / "res", tmp_path / "invented")

    def add_block(df):
        row = df[df["method"] == "tiny"].iloc[[0]].copy()
        row["block_id"] = "atlantis_main_st"
        df.loc[len(df)] = row.iloc[0]

    edit_csv(invented, add_block)
    commits = lb["hub"].commit_count("dataset", REPO)
    with pytest.raises(SubmissionError, match="L0/atlantis_main_st"):
        push_results(invented, REPO, endpoint=lb["hub"].url, log=lambda m: None)

    blanked = copy_results(lb["root"] / "res", tmp_path / "blanked")

    def blank(df):
        df.loc[(df["method"] == "tiny") & (df["block_id"] == "lund_seg1"), "cos_sim"] = np.nan

    edit_csv(blanked, blank)
    info = json.loads((blanked / "run.json").read_text())
    info["nan_reasons"].append({"column": "cos_sim", "reason": "not computed"})  # no rows: column-wide
    (blanked / "run.json").write_text(json.dumps(info))
    with pytest.raises(SubmissionError, match="lists no rows"):
        push_results(blanked, REPO, endpoint=lb["hub"].url, log=lambda m: None)
    assert lb["hub"].commit_count("dataset", REPO) == commits  # nothing was uploaded


def test_a_run_of_an_unpinned_group_and_an_unpinned_repo_are_refused(lb, tmp_path):
    other = copy_results(lb["root"] / "res", tmp_path / "other")
    info = json.loads((other / "run.json").read_text())
    info["encoder"]["config_hash"] = "f" * 64  # another encoder configuration
    (other / "run.json").write_text(json.dumps(info))
    with pytest.raises(SubmissionError, match="in no group pinned") as err:
        push_results(other, REPO, endpoint=lb["hub"].url, log=lambda m: None)
    assert "another encoder config" in str(err.value)
    lb["hub"].add_files("dataset", "tester/unpinned", {"README.md": b"# results\n"})
    with pytest.raises(SubmissionError, match="leaderboard init"):
        push_results(lb["root"] / "res", "tester/unpinned", endpoint=lb["hub"].url, log=lambda m: None)
    assert lb["hub"].commit_count("dataset", "tester/unpinned") == 1


def test_an_exclude_copies_folder_is_accepted_marked_and_verified(lb, tmp_path, capsys):
    bench = load_benchmark("demo")
    gen = tmp_path / "gen"
    shutil.copytree(lb["root"] / "gen" / "tiny", gen / "mixed")
    block = BLOCKS[0]
    (gen / "mixed" / "L0" / block / "02.jpg").write_bytes(panel_of_copies(bench, block, 1)[0])
    res = evaluate(gen, tmp_path / "res", lb["cache"], "--exclude-copies")
    assert json.loads((res / "run.json").read_text())["copy_audit"]["excluded"] is True
    assert main(["push-generations", str(gen), "--repo-id", "tester/mixed-gens", *lb["ep"]]) == 0
    capsys.readouterr()
    assert main(["push-results", str(res), "--repo-id", REPO, "--generations", "tester/mixed-gens", *lb["ep"]]) == 0
    out = capsys.readouterr().out
    assert "copies excluded" in out and "1 image(s)" in out
    run_id = out.split("submitted mixed as run ")[1].split()[0]
    verify(lb)
    assert record_of(lb, "mixed", run_id)["status"] == "verified"
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    mine = df[df["run_id"] == run_id]
    assert mine["copies_excluded"].all() and mine.loc[mine["block_id"] == block, "n_copied"].iloc[0] == 1


# -- time and concurrency come from the Hub ----------------------------------------------------------


def test_racing_pushes_both_land_and_never_touch_the_pinned_anchors(lb, tmp_path):
    folders = []
    for i in range(2):
        f = copy_results(lb["root"] / "res", tmp_path / f"race{i}")
        edit_csv(f, lambda df, i=i: df.__setitem__("method", df["method"].replace("tiny", f"racer{i}")))
        info = json.loads((f / "run.json").read_text())
        for rec in info["nan_reasons"]:
            rec["rows"] = [r.replace("tiny/", f"racer{i}/") for r in rec.get("rows", [])]
        (f / "run.json").write_text(json.dumps(info))
        folders.append(f)
    results, errors = [], []

    def push(folder):
        try:
            results.append(push_results(folder, REPO, endpoint=lb["hub"].url, log=lambda m: None,
                                        retry_base_delay=0.01))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=push, args=(f,)) for f in folders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(m for r in results for m in r.new) == ["racer0", "racer1"]
    files = lb["hub"].files("dataset", REPO)
    for path, data in lb["pinned"].items():
        if path.startswith("anchors/"):
            assert files[path] == data


def test_commit_checked_decides_again_on_the_state_it_commits_on(lb):
    repo = HubRepo(REPO, endpoint=lb["hub"].url, retry_base_delay=0.01, log=lambda m: None)
    seen = []

    def decide(state):
        seen.append(state.commit)
        if len(seen) == 1:  # another writer lands between our read and our commit
            lb["hub"].add_files("dataset", REPO, {"notes/other.txt": b"other writer\n"})
        return {"notes/ours.txt": f"decided on {state.commit}\n".encode()}, "ours"

    commit_checked(repo, decide, what="a test write")
    files = lb["hub"].files("dataset", REPO)
    assert len(seen) == 2 and seen[0] != seen[1]
    assert files["notes/ours.txt"].decode() == f"decided on {seen[1]}\n" and "notes/other.txt" in files


def test_committed_at_comes_from_the_hub_not_the_submitted_created_at(lb):
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    subs = df[df["stored_as"] == "submission"].drop_duplicates("run_id")
    assert (subs["committed_at"] != "").all()
    assert not subs["committed_at"].str.startswith("2099").any()
    hashes = {hashlib.sha256(str(x).encode()).hexdigest() for x in subs["created_at"]}
    assert hashes  # created_at is still carried as the submitter's claim


def test_rows_that_name_another_method_than_their_folder_are_ignored_and_named(lb):
    df, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    honest = df[(df["method"] == "tiny") & (df["stored_as"] == "submission")]
    forged = honest[honest["run_id"] == honest["run_id"].iloc[0]].drop(
        columns=["stored_as", "committed_at", "verification", "verification_detail", "copies_excluded"])
    forged = forged.assign(cos_sim=0.99)
    buf = io.StringIO()
    forged.to_csv(buf, index=False)
    lb["hub"].add_files("dataset", REPO, {"submissions/evil/0123456789abcdef/results.csv": buf.getvalue().encode()})
    after, _ = load_submissions(REPO, endpoint=lb["hub"].url)
    assert not (after["cos_sim"] == 0.99).any()
    assert any("submissions/evil/0123456789abcdef/results.csv" in n for n in after.attrs["ignored"])
    from geofidelity_bench.report.leaderboard import leaderboard_view

    assert any("evil" in n for n in leaderboard_view(after).notes)
