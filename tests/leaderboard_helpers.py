"""Pinning a results repo's group in tests (docs/benchmark.md section 13).

A results repo takes submissions only for a group its maintainer pinned (``leaderboard.json`` and
the group's anchors, written by ``geofidelity-bench leaderboard init``, which computes the anchors
from the benchmark and the encoder). Synthetic results folders (``test_leaderboard_hub.make_results``:
fingerprints like ``"a" * 64``, made-up encoder hashes) have no benchmark or encoder that ``init``
could load, so :func:`pin_from_results` pins their group with the library's own
:func:`geofidelity_bench.hub.leaderboard.pin_group`, from the folder's own anchor rows and run.json:
the same file layout and the same compare-and-swap commit as ``init``, without the computation.
Results of the real demo are pinned with the real command (:func:`init_demo`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

#: The prompt conditions of ``make_results`` folders.
CONDITIONS = ("L0", "L1", "C_WRONG_STREET")


def group_blocks(sub, conditions: Sequence[str], blocks) -> dict[str, list[str]]:
    """{condition: block ids} of the group: ``blocks`` (a list for every condition, or a {condition: list}
    mapping), else the blocks of the folder's anchor rows (the benchmark's blocks; every row's without anchors)."""
    if isinstance(blocks, Mapping):
        return {str(c): sorted(map(str, b)) for c, b in blocks.items()}
    if blocks is None:
        rows = sub.anchor_rows if len(sub.anchor_rows) else sub.rows
        blocks = rows["block_id"].astype(str).unique()
    ids = sorted({str(b) for b in blocks})
    return {str(c): list(ids) for c in conditions}


def pinned_group(folder, *, conditions: Sequence[str] = CONDITIONS, blocks: Iterable[str] | Mapping | None = None,
                 segmenter: Mapping | None = None):
    """(PinnedGroup, anchor rows, run.json) of the comparable group of the results ``folder``."""
    from geofidelity_bench.caveats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
    from geofidelity_bench.comparability import comparability_of_run
    from geofidelity_bench.hub.leaderboard_config import PinnedGroup
    from geofidelity_bench.hub.results_repo import anchor_file_rows, validate_results_folder

    sub = validate_results_folder(Path(folder))
    info = sub.run_info
    comp = comparability_of_run(info)
    bench, enc = info["benchmark"], info["encoder"]
    group = PinnedGroup(
        group_id=comp.group_id,
        benchmark={"id": bench.get("source") or bench.get("name"), "name": bench.get("name"), "revision": None,
                   "fingerprint": bench["fingerprint"]},
        encoder={"name": enc["name"], "weights": None, "config_hash": enc["config_hash"]},
        protocol_version=comp.protocol_version,
        segmenter=dict(segmenter) if segmenter else None,
        bootstrap={"n_resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED},
        blocks=group_blocks(sub, conditions, blocks),
        anchors_run_id=sub.run_id,
    )
    return group, anchor_file_rows(sub), info


def pin_from_results(hub, repo_id: str, folder, *, conditions: Sequence[str] = CONDITIONS,
                     blocks: Iterable[str] | Mapping | None = None, segmenter: Mapping | None = None,
                     make_default: bool = False, require_verified: bool | None = None):
    """Pins, in ``repo_id`` on the fake Hub ``hub``, the comparable group of the results ``folder`` with the
    folder's own anchor rows as the group's anchors (their run id is the group's ``anchors_run_id``).

    ``conditions``/``blocks``: the group's block set per prompt condition (default: the folder's anchor
    blocks in each of ``conditions``; ``blocks`` may be a {condition: [block ids]} mapping).
    ``segmenter``: the group's GAAS segmenter, ``{"name", "weights", "config_hash"}`` (None: none pinned).
    The first group pinned in a repo is its default unless another one is pinned with ``make_default``.
    Returns :class:`~geofidelity_bench.hub.leaderboard.InitReport` (``commit``, ``anchors_path``, ``group``).
    """
    from geofidelity_bench.hub.leaderboard import pin_group
    from geofidelity_bench.hub.push import HubRepo

    group, anchors, info = pinned_group(folder, conditions=conditions, blocks=blocks, segmenter=segmenter)
    repo = HubRepo(repo_id, endpoint=hub.url, retry_base_delay=0.01, log=lambda m: None)
    return pin_group(repo, group, anchors, info, make_default=make_default, require_verified=require_verified)


def init_demo(hub, repo_id: str, cache_dir, *extra: str) -> None:
    """The maintainer's real ``geofidelity-bench leaderboard init`` of the demo benchmark with the offline encoder
    (efficientnet-lite0, the demo's) in ``repo_id`` on the fake Hub; ``cache_dir``: a copy of the session's demo
    embedding cache (conftest's ``warm_demo_cache``), so that no embedding is computed."""
    from geofidelity_bench.cli import main

    assert main(["leaderboard", "init", "--repo-id", repo_id, "--benchmark", "demo", "--encoder", "efficientnet-lite0",
                 "--no-progress", "--endpoint", hub.url, "--cache-dir", str(cache_dir), *extra]) == 0


def segmenter_of(name: str) -> dict:
    """The pinned segmenter record of a ``make_results(segmenter=name)`` folder (its config hash is ``name-hash``)."""
    return {"name": name, "weights": None, "config_hash": f"{name}-hash"}


__all__ = ["CONDITIONS", "group_blocks", "init_demo", "pin_from_results", "pinned_group", "segmenter_of"]
