"""``geofidelity-bench push-results``: submit an ``evaluate`` results folder to a results repo on the Hub.

::

    geofidelity-bench generate --model sdxl --out gen
    geofidelity-bench evaluate --generated gen --encoder dinov2-base --out results
    geofidelity-bench push-results results --repo-id ORG/geofidelity-results [--model-card ORG/my-model]
"""

from __future__ import annotations

import argparse
import re

from ..errors import redact_url
from ._common import hub_repo_id


def _looks_like_repo_id(text: str) -> bool:
    return re.fullmatch(r"[\w.-]+/[\w.-]+", text) is not None


def _cmd_push_results(args: argparse.Namespace) -> int:
    from ..hub.results_repo import push_results

    # Everything --model-card needs is checked before the results are pushed: the method, and a card
    # whose metadata parses (a broken card would otherwise fail after the upload).
    card = _model_card_target(args) if args.model_card else None
    report = push_results(args.results_dir, args.repo_id, endpoint=args.endpoint, private=args.private,
                          allow_copies=args.allow_copies)
    for line in report.lines():
        print(line)
    if card is not None:
        _model_card(args, report, *card)
    return 0


def _model_card_target(args: argparse.Namespace):
    """(validated submission, method, parsed model card) for --model-card, or a one-line error."""
    from ..hub.results_repo import read_model_card, validate_results_folder
    from ._common import CLIError

    sub = validate_results_folder(args.results_dir)
    rows = sub.rows
    generators = sorted(rows.loc[rows["condition"] == "L1", "method"].unique())
    generators = [m for m in generators if m in sub.methods]
    method = args.method or (generators[0] if len(generators) == 1 else None)
    if method is None:
        raise CLIError(f"--model-card needs --method: the results hold the L1 generators {generators}")
    if method not in generators:
        raise CLIError(f"--method {method}: not an L1 generator of {args.results_dir} (L1 generators: {generators})")
    return sub, method, read_model_card(args.model_card, endpoint=args.endpoint)


def _model_card(args: argparse.Namespace, report, sub, method: str, card) -> None:
    from ..caveats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
    from ..comparability import comparability_of_run
    from ..hub.results_repo import update_model_card
    from ..report.context import LEADERBOARD_METRICS
    from ..report.leaderboard import LeaderboardView, SubmissionGroup, leaderboard_tables

    rows = sub.rows
    if any(m == method for m, _c, _b in report.copied):
        print(f"{args.model_card}: model card NOT updated: {method}'s panels copy the benchmark's photos "
              "(the copy audit), which is not a model's result")
        return
    if report.anchor_check is not None and not report.anchor_check.comparable:
        print(f"{args.model_card}: model card NOT updated: the run's anchors differ from its group's "
              f"({report.anchor_check.detail})")
        return
    comp = comparability_of_run(sub.run_info)
    mine = rows[(rows["method"] == method) | (rows["condition"] == "anchor")]
    group = SubmissionGroup(comp.key, "", "", [report.run_id], "")
    view = LeaderboardView(group, mine, sorted(mine["block_id"].unique()), [method])
    table = leaderboard_tables(view, [sub.run_info], n_resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)["leaderboard"]
    data = table.data
    row = data[(data["method"] == method) & (data["condition"] == "L1")].iloc[0]
    scores = [{"metric": m, "value": row[m], "ci_low": row[f"{m}_ci_low"], "ci_high": row[f"{m}_ci_high"],
               "n_blocks": int(row["n_blocks"])}
              for m in LEADERBOARD_METRICS]
    if not comp.segmenter:  # GAAS of an unrecorded segmenter is comparable with nothing
        scores = [dict(s, value=float("nan")) if s["metric"] == "gaas" else s for s in scores]
    bench = sub.run_info["benchmark"]
    source = str(bench.get("source") or "")
    dataset_type = source if _looks_like_repo_id(source) else str(bench.get("name"))
    encoder = str(sub.run_info["encoder"]["name"])
    done = update_model_card(args.model_card, scores, comparability=comp, encoder=encoder, dataset_type=dataset_type,
                             dataset_name=f"GeoFidelity-Bench ({bench.get('name')})", dataset_config="L1",
                             endpoint=args.endpoint, card=card,
                             source_url=redact_url(f"{args.endpoint or 'https://huggingface.co'}/datasets/{args.repo_id}"))
    print(f"{args.model_card}: model card updated: {done.written} result(s) of {method} with encoder {encoder} "
          f"({comp.short()}), {done.removed} earlier result(s) of the same key replaced; {done.n_results} result(s) "
          "in its model-index")
    if done.unkeyed:
        print(f"{args.model_card}: kept {done.unkeyed} older GeoFidelity-Bench result(s) that record no encoder or "
              "benchmark fingerprint (not comparable with these; remove them by hand if they are stale)")


def register(sub) -> None:
    p = sub.add_parser(
        "push-results",
        help="submit an `evaluate` results folder to a results dataset repo on the Hub (the living leaderboard)",
        description="Validates RESULTS_DIR (results.csv, run.json with benchmark fingerprint, encoder config and "
        "hash, protocol and library version; finite in-range scores; no generated image flagged by the copy audit "
        "unless --allow-copies) and uploads each generator's rows under submissions/{method}/{run_id}/ of the "
        "dataset repo. The real-image anchors are stored once per comparable group (anchors/{group_id}/) and the "
        "run's anchors are checked against them; sanity methods are not submitted. Re-pushing the same run uploads "
        "nothing; another run is a new submission, never an overwrite. The token comes from HF_TOKEN or "
        "`hf auth login`.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="folder written by `geofidelity-bench evaluate`")
    p.add_argument("--repo-id", required=True, type=hub_repo_id, metavar="ORG/NAME", help="results dataset repo (created if missing)")
    p.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    p.add_argument("--private", action="store_true", help="create the repo private (ignored when it exists)")
    p.add_argument("--allow-copies", action="store_true",
                   help="submit even though generated images are flagged by the copy audit (results.csv n_copied, "
                        "run.json near_copies); the leaderboard then marks the submission as copied and never ranks it")
    p.add_argument("--model-card", default=None, type=hub_repo_id, metavar="MODEL_REPO",
                   help="also write the method's L1 scores into this model repo's model-index, keyed by the "
                        "comparability key (benchmark fingerprint, encoder config hash, protocol) and naming the "
                        "encoder; a newer run of the same key replaces all of that key's results, other keys are kept")
    p.add_argument("--method", default=None,
                   help="which method's scores go to --model-card (default: the only L1 generator)")
    p.set_defaults(func=_cmd_push_results)
