"""``report --results PATH`` with a local folder that is not there (issue 43): a text that can only be a
path (``./x``, ``../x/``, ``/abs``, ``~/x``, ``a/b/c``) is said to be a missing folder, never read as a Hub
repo id (which gave "not a valid Hub repo id" or an offline error about the Hub); an ``ORG/NAME`` that is
neither says both."""

from __future__ import annotations

import pytest

from geofidelity_bench.cli import main


@pytest.mark.parametrize("given", ["./missing-results", "../missing-results", "../missing-results/", ".cache/results", "{tmp}/missing", "~/geofidelity-no-such-dir",
                                   "runs/2026/missing", "runs/missing/"])
def test_a_missing_results_folder_is_named_as_a_folder(given, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = given.format(tmp=tmp_path)
    assert main(["report", "--results", path, "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("does not exist") and "results folder" in err, err
    assert "repo id" not in err and "Hub" not in err and "offline" not in err.lower()
    assert len(err.splitlines()) == 1


def test_an_org_name_that_is_no_folder_and_no_reachable_repo_says_both(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["report", "--results", "runs/missing", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "results repo runs/missing" in err and "there is no local folder runs/missing" in err
