"""``geofidelity-bench push-results`` (submit an ``evaluate`` results folder to a results repo on the Hub)
and ``geofidelity-bench leaderboard init|verify`` (the maintainer's side: pin the group, re-compute
every submission from its images; docs/benchmark.md section 13).

::

    geofidelity-bench leaderboard init --repo-id ORG/geofidelity-results --benchmark ORG/bench --encoder dinov2-base
    geofidelity-bench generate --model sdxl --out gen
    geofidelity-bench push-generations gen --repo-id ORG/my-generations
    geofidelity-bench evaluate --generated gen --encoder dinov2-base --out results
    geofidelity-bench push-results results --repo-id ORG/geofidelity-results --generations ORG/my-generations
    geofidelity-bench leaderboard verify --repo-id ORG/geofidelity-results
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
    report = push_results(args.results_dir, args.repo_id, endpoint=args.endpoint, generations=args.generations,
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
        "hash, protocol and library version; finite in-range scores; every NaN with its row's reason; no generated "
        "image flagged by the copy audit unless --allow-copies or evaluate --exclude-copies) and uploads each "
        "generator's rows under submissions/{method}/{run_id}/ of a results repo whose maintainer pinned the group "
        "(`leaderboard init`). The run must be in a pinned group and its rows on the group's blocks; its anchors are "
        "checked against the pinned ones, never written. --generations records the images so that `leaderboard "
        "verify` can re-compute every number. Re-pushing the same run uploads nothing; another run is a new "
        "submission, never an overwrite. The token comes from HF_TOKEN or `hf auth login`.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="folder written by `geofidelity-bench evaluate`")
    p.add_argument("--repo-id", required=True, type=hub_repo_id, metavar="ORG/NAME", help="results dataset repo (pinned by its maintainer with `leaderboard init`)")
    p.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    p.add_argument("--generations", default=None, metavar="ORG/NAME[@REVISION]",
                   help="the dataset repo (pushed with `push-generations`) holding the images this run scored; the "
                        "submission records the commit it resolves to and every image's sha256, so that `leaderboard "
                        "verify` can re-compute every number. Without it the numbers stay self-reported")
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
    _register_leaderboard(sub)


# -- leaderboard init | verify ------------------------------------------------------------------------


def _cmd_init(args: argparse.Namespace) -> int:
    from ..hub.leaderboard import init_leaderboard

    report = init_leaderboard(
        args.repo_id, args.benchmark, args.encoder, encoder_weights=args.encoder_weights, revision=args.revision,
        segmenter=None if args.no_gaas else args.segmenter, segmenter_weights=args.segmenter_weights,
        require_verified=True if args.require_verified else (False if args.allow_self_reported else None),
        make_default=args.make_default, endpoint=args.endpoint, private=args.private, cache_dir=args.cache_dir,
        device=args.device, batch_size=args.batch_size, progress=not args.no_progress)
    for line in report.lines():
        print(line)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from ..hub.verify import verify_repo

    if args.max is not None and args.max < 1:
        from ._common import CLIError

        raise CLIError(f"--max must be at least 1, got {args.max}")
    report = verify_repo(args.repo_id, max_submissions=args.max, endpoint=args.endpoint, benchmark=args.benchmark,
                         encoder_weights=args.encoder_weights, segmenter_weights=args.segmenter_weights,
                         cache_dir=args.cache_dir, device=args.device, batch_size=args.batch_size,
                         progress=not args.no_progress)
    for line in report.lines():
        print(line)
    return 0


def _register_leaderboard(sub) -> None:
    from ._common import add_batch_size_arg

    p = sub.add_parser(
        "leaderboard",
        help="the maintainer's side of a results repo: pin the comparable group (init), re-compute submissions (verify)",
        description="A leaderboard that trusts nothing a submitter writes (docs/benchmark.md section 13): `init` pins "
        "the group (benchmark, encoder, protocol, segmenter, the block set per condition) in leaderboard.json and "
        "computes its real-image anchors; `verify` re-computes every submission from its pushed images and records "
        "verified / mismatch / unverifiable.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    i = actions.add_parser(
        "init", help="pin a comparable group in a results repo and compute its anchors",
        description="Writes leaderboard.json (benchmark id, revision and fingerprint; encoder and its config hash; "
        "protocol; GAAS segmenter; bootstrap setting; the group's blocks per prompt condition; the default group; "
        "whether only verified submissions are ranked) and the group's real-image anchors, computed here, in one "
        "commit on the commit it read (created if the repo is missing). Running it again for a pinned group "
        "re-computes the anchors and refuses any difference; --require-verified / --allow-self-reported and "
        "--make-default change the repo's settings.")
    i.add_argument("--repo-id", required=True, type=hub_repo_id, metavar="ORG/NAME", help="the results dataset repo")
    i.add_argument("--benchmark", required=True, metavar="ID_OR_DIR", help="the benchmark (demo, a folder or a Hub id)")
    i.add_argument("--revision", default=None, help="Hub revision of the benchmark (recorded; default: main)")
    i.add_argument("--encoder", required=True, help="encoder name (see `geofidelity-bench embed --list`)")
    i.add_argument("--encoder-weights", default=None, help="local weights folder (or Hub id) for the encoder")
    i.add_argument("--segmenter", default=None,
                   help="GAAS segmenter of the group (mask2former-vistas, segformer-cityscapes; default: none, GAAS not "
                        "ranked)")
    i.add_argument("--segmenter-weights", default=None, help="local weights folder (or Hub id) for the segmenter")
    i.add_argument("--no-gaas", action="store_true", help="pin the group without a GAAS segmenter")
    i.add_argument("--require-verified", action="store_true", help="rank only verified submissions")
    i.add_argument("--allow-self-reported", action="store_true",
                   help="rank self-reported submissions too (marked) until they are verified (the default of a new repo)")
    i.add_argument("--make-default", action="store_true", help="make this group the repo's default group")
    i.add_argument("--private", action="store_true", help="create the repo private (ignored when it exists)")
    i.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    i.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    i.add_argument("--cache-dir", default=None, help="embedding cache folder (default: no cache)")
    add_batch_size_arg(i, 32, "images per encoder batch")
    i.add_argument("--no-progress", action="store_true", help="hide progress bars")
    i.set_defaults(func=_cmd_init)

    v = actions.add_parser(
        "verify", help="re-compute every unverified submission from its pushed images",
        description="For each submission without a verification record: downloads its panels at the recorded commit, "
        "checks their sha256s, re-runs evaluate with the pinned group's settings (its own copy audit included) and "
        "writes verifications/{method}/{run_id}.json (verified / mismatch / unverifiable, and why) with the verifier's "
        "rows. Resumable (one commit per submission); under `accelerate launch` or `torchrun` each process takes "
        "every WORLD_SIZE-th submission. Run it as a scheduled job on a GPU box or in CI.")
    v.add_argument("--repo-id", required=True, type=hub_repo_id, metavar="ORG/NAME", help="the results dataset repo")
    v.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    v.add_argument("--max", type=int, default=None, metavar="N", help="verify at most N submissions in this run")
    v.add_argument("--benchmark", default=None, metavar="ID_OR_DIR",
                   help="where to load the pinned benchmark from (checked against its pinned fingerprint; default: "
                        "its pinned id)")
    v.add_argument("--encoder-weights", default=None,
                   help="a local copy of the pinned encoder's weights (checked against the pinned config hash)")
    v.add_argument("--segmenter-weights", default=None, help="a local copy of the pinned segmenter's weights")
    v.add_argument("--device", default=None, help="torch device (default: this process's GPU, else cpu)")
    v.add_argument("--cache-dir", default=None, help="embedding cache folder (reference embeddings; default: no cache)")
    add_batch_size_arg(v, 32, "images per encoder batch")
    v.add_argument("--no-progress", action="store_true", help="hide progress bars")
    v.set_defaults(func=_cmd_verify)
