"""``geofidelity-bench demo`` (the main job) and ``geofidelity-bench evaluate``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._common import (
    BENCHMARK_HELP,
    add_encoder_args,
    add_rekey_arg,
    add_segmenter_args,
    check_out_folder,
    encoder_and_cache,
    segmenter_or_reason,
    warn_rekeyed,
)
from ..errors import redact_url
from ..provenance import command_line, utc_timestamp
from ..results import hierarchy_text, leaderboard_text, run_record, write_results


def _run_info(args, bench, encoder, cache, results, started: float, segmenter, gaas_reason,
              extra: dict | None = None) -> dict:
    info = {
        "command": command_line(args),
        "created_at": utc_timestamp(),
        "elapsed_s": round(time.time() - started, 2),
        # a URL given as an option (--cache-dir http://user:pw@host/...) is recorded without its credentials
        "parameters": {k: redact_url(v) if isinstance(v, str) else v for k, v in vars(args).items()
                       if k not in ("func", "argv")},
        **run_record(bench, encoder, results, cache=cache, segmenter=segmenter, gaas_reason=gaas_reason),
    }
    if extra:
        info.update(extra)
    return info


# -- evaluate -------------------------------------------------------------------------------------


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from ..benchmark import load_benchmark
    from ..evaluation import evaluate_panels, load_generated_panels, unpromptable_message
    from ..near_copies import near_copies_warning

    started = time.time()
    check_out_folder(args.out)
    bench = load_benchmark(args.benchmark, revision=args.revision, rekey_mismatched_images=args.rekey_mismatched_images)
    warn_rekeyed(bench)
    # Before any model is loaded, every cheap check (layout, names, manifest, prompts; every file decoded
    # once): all problems of every kind in one error.
    loaded = load_generated_panels(args.generated, bench, methods=args.methods, conditions=args.conditions,
                                   extra_conditions=args.extra_conditions, ignore_manifest=args.ignore_manifest,
                                   skip_bad_images=args.skip_bad_images, allow_unpromptable=args.allow_unpromptable,
                                   progress=not args.no_progress)
    panels, checked, unpromptable = loaded.panels, loaded.image_check, loaded.unpromptable
    manifest = _manifest_info(args, panels, bench)
    if unpromptable:
        print(f"warning: --allow-unpromptable: {unpromptable_message(unpromptable).splitlines()[0]} scored anyway "
              "(recorded in run.json)", file=sys.stderr)
    for rec in checked.skipped:
        print(f"skipping {rec['reason']}", file=sys.stderr)
    encoder, cache = encoder_and_cache(args)
    segmenter, gaas_reason = segmenter_or_reason(args)
    print(f"scoring {len(panels)} panel(s) from {args.generated} against {bench!r} with encoder {encoder.name}",
          file=sys.stderr)
    results = evaluate_panels(bench, panels, encoder, cache=cache, batch_size=args.batch_size,
                              num_workers=args.num_workers,
                              progress=not args.no_progress, include_anchors=not args.no_anchors,
                              segmenter=segmenter, image_check=checked, allow_unpromptable=args.allow_unpromptable,
                              exclude_copies=args.exclude_copies)
    copies = near_copies_warning(results.attrs.get("near_copies", []))
    if copies:
        print(f"warning: {copies}", file=sys.stderr)
        if args.exclude_copies:
            print("--exclude-copies: the panels were scored without the flagged images (n_generated counts the "
                  "images scored, n_copied the flagged ones; run.json copy_audit.excluded is true)", file=sys.stderr)
    info = _run_info(args, bench, encoder, cache, results, started, segmenter, gaas_reason,
                     extra={"generation_manifest": manifest, "extra_conditions": list(args.extra_conditions or [])})
    out = Path(args.out)
    write_results(out, results, info)
    print(leaderboard_text(results))
    print(f"\nwrote {out}/results.csv ({len(results)} rows), summaries and run.json")
    return 0


def _manifest_info(args: argparse.Namespace, panels, bench) -> dict:
    """What run.json records about the generation manifest: checked, absent, or ignored (with what was ignored)."""
    from ..generated_folder import check_generation_manifest
    from ..generation.manifest import MANIFEST_FILE

    if not args.ignore_manifest:  # load_generated_panels checked the panels against it
        path = Path(args.generated) / MANIFEST_FILE
        return {"file": str(path) if path.is_file() else None, "checked": path.is_file(), "ignored": False}
    check = check_generation_manifest(args.generated, panels, benchmark_fingerprint=lambda: bench.fingerprint)
    for problem in check.problems:
        print(f"warning: --ignore-manifest: {problem}", file=sys.stderr)
    return {"file": check.manifest, "checked": False, "ignored": True, "ignored_problems": check.problems}


def _add_evaluate(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score generated panels ({method}/{condition}/{block_id}/NN.jpg) against a benchmark",
        description=(
            "Score the panels of a generated folder ({method}/{condition}/{block_id}/NN.jpg, as `generate` writes "
            "it) against a benchmark's reference photos, together with the three real-image anchors. Writes "
            "--out/results.csv (one row per method, condition and block), summary_*.csv (means over blocks) and "
            "run.json (every parameter, the encoder, the benchmark fingerprint and what was checked), and prints "
            "the leaderboard. `geofidelity-bench report --results OUT` turns the folder into tables and plots."
        ),
    )
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--generated", required=True, help="folder of generated panels {method}/{condition}/{block_id}/NN.jpg")
    p.add_argument("--methods", nargs="+", default=None, help="only these method folders (default: all)")
    p.add_argument("--conditions", nargs="+", default=None, help="only these condition folders (default: all)")
    p.add_argument("--extra-conditions", nargs="+", default=None, metavar="NAME",
                   help="condition folders of your own beyond the benchmark's prompt conditions (L0, L1, L2, GPS_ONLY, "
                        "C_*); any other condition folder is an error. The report shows them in their own table")
    p.add_argument("--ignore-manifest", action="store_true",
                   help="score panels even when the folder's generation manifest.parquet does not list their images "
                        "or they were made with other settings (run.json records what was ignored)")
    p.add_argument("--allow-unpromptable", action="store_true",
                   help="score panels of a prompt condition whose prompt the benchmark refuses for their block (e.g. "
                        "L1 for a block without a street name: no prompt could have produced them) instead of "
                        "refusing them, naming each; run.json records them under unpromptable_panels")
    p.add_argument("--out", required=True, help="output folder (results.csv, summary_*.csv, run.json)")
    p.add_argument("--no-anchors", action="store_true", help="do not score the three real-image anchors")
    p.add_argument("--exclude-copies", action="store_true",
                   help="score the panels without the images the copy audit flags as copies of the benchmark's own "
                        "photos (docs/benchmark.md section 5, Copy audit); n_copied and run.json copy_audit record them")
    p.add_argument("--skip-bad-images", action="store_true",
                   help="score the panels without their undecodable images (each recorded in run.json; a panel left "
                        "with fewer than 2 images is NaN) instead of stopping with a list of them")
    add_rekey_arg(p)
    add_encoder_args(p, "dinov2-base")
    add_segmenter_args(p)
    p.set_defaults(func=_cmd_evaluate)


# -- demo -----------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..benchmark import load_benchmark
    from ..evaluation import anchor_panels, evaluate_panels, sanity_panels

    started = time.time()
    check_out_folder(args.out)
    bench = load_benchmark("demo")
    encoder, cache = encoder_and_cache(args)
    segmenter, gaas_reason = segmenter_or_reason(args, local_only=True)
    panels = {**anchor_panels(bench), **sanity_panels(bench)}
    print(
        f"GeoFidelity-Bench demo: {len(bench.blocks)} blocks in {len(bench.cities)} cities, encoder {encoder.name} "
        f"(offline), {len(panels)} panels (3 real-image anchors + 2 sanity methods)",
        file=sys.stderr,
    )
    results = evaluate_panels(bench, panels, encoder, cache=cache, batch_size=args.batch_size,
                              num_workers=args.num_workers,
                              progress=not args.no_progress, segmenter=segmenter)
    info = _run_info(
        args, bench, encoder, cache, results, started, segmenter, gaas_reason,
        extra={"sanity_methods": {
            "sanity_augmented_heldout": "held-out photos, lightly cropped and jittered (expected near the top; "
                                        "the copy audit flags it: a copy by construction)",
            "sanity_world": "photos of the world pool, not of any block (expected near the bottom; the copy audit "
                            "flags it: the world pool's own photos)",
        }},
    )
    out = Path(args.out)
    write_results(out, results, info)
    from ..report import build_report

    build_report(results, out / "report", run_info=info)
    print("\nLeaderboard (mean over blocks; ^ higher is better, v lower is better)")
    print(leaderboard_text(results))
    print("\nSimilarity hierarchy (Table 4 style): query panel vs the target block and its negatives")
    print(hierarchy_text(results))
    print("\n" + _demo_copy_audit_text(results))
    if segmenter is None:
        print(f"\nGAAS: n/a - {gaas_reason}")
    else:
        print(f"\nGAAS computed with segmenter {segmenter.name}.")
    print("Blocks with a single held-out photo repeat it to fill the 4-image anchor panel (docs/benchmark.md section 6), which raises "
          "heldout_real's MMD/DCSF on this tiny demo.")
    print("This demo benchmark has 7 blocks: it checks the pipeline end to end, it cannot rank generators.")
    print(f"\nwrote {out}/results.csv, summary_*.csv, run.json and the report ({out}/report/report.md, plots/) "
          f"in {time.time() - started:.1f} s")
    return 0


def _demo_copy_audit_text(results) -> str:
    """What the demo's copy audit found: the sanity methods are flagged, as expected; anything else is named."""
    from ..near_copies import EXPECTED_COPIES, near_copies_warning

    records = results.attrs.get("near_copies", [])
    audit = results.attrs.get("copy_audit") or {}
    by_method: dict[str, int] = {}
    for r in records:
        by_method[r["method"]] = by_method.get(r["method"], 0) + 1
    expected = ", ".join(f"{m} ({by_method[m]} image(s))" for m in EXPECTED_COPIES if m in by_method)
    text = (f"Copy audit: {audit.get('n_flagged', len(records))} of {audit.get('n_audited', 0)} audited image(s) "
            f"flagged as copies of the benchmark's own photos (docs/benchmark.md section 5, Copy audit). "
            + (f"Flagged as expected: {expected}: the sanity methods are made of the benchmark's own photos "
               "(augmented held-out photos; world-pool photos), so their rows are marked as copied (n_copied)."
               if expected else "The sanity methods were NOT flagged: this is not expected."))
    missed = [m for m in EXPECTED_COPIES if m not in by_method and any(r["method"] == m for r in audit.get("images", []))]
    if missed:
        text += f" Not flagged although copies by construction: {', '.join(missed)}."
    other = [r for r in records if r["method"] not in EXPECTED_COPIES]
    if other:
        text += "\nwarning: " + (near_copies_warning(other) or "")
    return text


def _add_demo(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job, offline: score real-image anchors and sanity methods on the embedded demo benchmark",
        description=(
            "The main job, offline and on a CPU: score the three real-image anchors and two sanity methods on the "
            "demo benchmark shipped with the package (7 blocks in 3 cities). Writes --out/results.csv, "
            "summary_*.csv, run.json and the report (--out/report/report.md and its plots/), and prints the "
            "leaderboard and the similarity hierarchy."
        ),
    )
    p.add_argument("--out", default="geofidelity-demo", help="output folder (default: ./geofidelity-demo)")
    add_encoder_args(p, "efficientnet-lite0")
    add_segmenter_args(p)
    p.set_defaults(func=_cmd_demo)


def register(sub) -> None:
    _add_demo(sub)  # the main job first
    _add_evaluate(sub)
