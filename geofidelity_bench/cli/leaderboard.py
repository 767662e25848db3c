"""``geofidelity-bench push-results``: submit an ``evaluate`` results folder to a results repo on the Hub.

::

    geofidelity-bench generate --model sdxl --out gen
    geofidelity-bench evaluate --generated gen --encoder dinov2-base --out results
    geofidelity-bench push-results results --repo-id ORG/geofidelity-results [--model-card ORG/my-model]
"""

from __future__ import annotations

import argparse
import re


def _looks_like_repo_id(text: str) -> bool:
    return re.fullmatch(r"[\w.-]+/[\w.-]+", text) is not None


def _cmd_push_results(args: argparse.Namespace) -> int:
    from ..hub.results_repo import push_results

    report = push_results(args.results_dir, args.repo_id, endpoint=args.endpoint, private=args.private)
    for method in report.new:
        print(f"{args.repo_id}: submitted {method} as run {report.run_id}")
    for method in report.already:
        print(f"{args.repo_id}: {method} run {report.run_id} is already submitted (nothing uploaded)")
    if args.model_card:
        _model_card(args, report.run_id)
    return 0


def _model_card(args: argparse.Namespace, run_id: str) -> None:
    from ..hub.results_repo import update_model_card, validate_results_folder
    from ..report.leaderboard import LeaderboardView, SubmissionGroup, leaderboard_tables

    sub = validate_results_folder(args.results_dir)
    rows = sub.rows
    generators = sorted(rows.loc[rows["condition"] == "L1", "method"].unique())
    method = args.method or (generators[0] if len(generators) == 1 else None)
    if method is None:
        from ._common import CLIError

        raise CLIError(f"--model-card needs --method: the results hold the L1 generators {generators}")
    group = SubmissionGroup(("", "", ""), "", "", [run_id], "")
    view = LeaderboardView(group, rows, sorted(rows["block_id"].unique()), [method])
    table = leaderboard_tables(view, [sub.run_info])["leaderboard"]
    data = table.data
    row = data[(data["method"] == method) & (data["condition"] == "L1")].iloc[0]
    from ..report.context import LEADERBOARD_METRICS

    scores = [{"metric": m, "value": row[m], "ci_low": row[f"{m}_ci_low"], "ci_high": row[f"{m}_ci_high"]}
              for m in LEADERBOARD_METRICS]
    bench = sub.run_info["benchmark"]
    source = str(bench.get("source") or "")
    dataset_type = source if _looks_like_repo_id(source) else str(bench.get("name"))
    n = update_model_card(args.model_card, scores, dataset_type=dataset_type,
                          dataset_name=f"GeoFidelity-Bench ({bench.get('name')})", dataset_config="L1",
                          dataset_revision=str(bench.get("fingerprint")), endpoint=args.endpoint,
                          source_url=f"{args.endpoint or 'https://huggingface.co'}/datasets/{args.repo_id}")
    print(f"{args.model_card}: model card updated ({n} result(s) in its model-index)")


def register(sub) -> None:
    p = sub.add_parser(
        "push-results",
        help="submit an `evaluate` results folder to a results dataset repo on the Hub (the living leaderboard)",
        description="Validates RESULTS_DIR (results.csv, run.json with benchmark fingerprint, encoder config and "
        "hash, protocol and library version; finite in-range scores) and uploads it under "
        "submissions/{method}/{run_id}/ of the dataset repo. Re-pushing the same run uploads nothing; another run "
        "is a new submission, never an overwrite. The token comes from HF_TOKEN or `hf auth login`.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="folder written by `geofidelity-bench evaluate`")
    p.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="results dataset repo (created if missing)")
    p.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    p.add_argument("--private", action="store_true", help="create the repo private (ignored when it exists)")
    p.add_argument("--model-card", default=None, metavar="MODEL_REPO",
                   help="also write the method's L1 scores into this model repo's model-index (kept results merge)")
    p.add_argument("--method", default=None,
                   help="which method's scores go to --model-card (default: the only L1 generator)")
    p.set_defaults(func=_cmd_push_results)
