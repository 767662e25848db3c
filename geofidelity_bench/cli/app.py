"""``geofidelity-bench app``: the Gradio demo app on this machine (local only, never shared)."""

from __future__ import annotations

import argparse
import sys

from ._common import BENCHMARK_HELP, CLIError, add_encoder_args, hub_repo_id, resolve_num_workers_arg


def _cmd_app(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import importlib.util

    if importlib.util.find_spec("gradio") is None:
        raise CLIError('the app needs gradio: pip install "geofidelity-bench[app]"')
    from ..demo_app import build_app, launch, load_app_data, network_exposure_warning

    exposed = network_exposure_warning(args.host, args.port)
    if exposed:
        print(exposed, file=sys.stderr)  # first, before the minutes of loading
    resolve_num_workers_arg(args)
    data = load_app_data(
        args.benchmark,
        args.encoder,
        encoder_weights=args.encoder_weights,
        revision=args.revision,
        device=args.device,
        dtype=args.dtype,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        results_csv=args.results,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        num_workers=args.num_workers,
    )
    board = None
    results_repo = args.results_repo or os.environ.get("GEOFIDELITY_RESULTS_REPO") or None
    if results_repo:
        from ..demo_app import HubBoard

        board = HubBoard(results_repo, endpoint=args.endpoint).refresh()
        print(board.status, file=sys.stderr)
    demo = build_app(data, board)
    where = f"http://{args.host}:{args.port or 7860}"
    print(f"GeoFidelity-Bench app on {where} (Ctrl+C stops it)", file=sys.stderr)
    launch(demo, host=args.host, port=args.port, inbrowser=args.open, quiet=True)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "app",
        help="run the demo app (explore blocks, score your images, leaderboard) in the browser, locally",
        description="Runs the GeoFidelity-Bench Gradio app on this machine. Offline it uses the embedded demo "
        "benchmark and the offline encoder; with network and weights e.g. --benchmark user/name "
        "--encoder dinov2-base. The app is never shared publicly from here.",
    )
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset (default: main)")
    add_encoder_args(p, "efficientnet-lite0")
    p.add_argument("--results", default=None, metavar="CSV",
                   help="results.csv for the leaderboard (default: the anchors and sanity methods scored at startup); "
                   "the run.json next to it says which benchmark, encoder and protocol produced it (without one, "
                   "the app says they are unknown)")
    p.add_argument("--results-repo", default=None, type=hub_repo_id, metavar="ORG/NAME",
                   help="results repo on the Hub (see push-results) for the Hub leaderboard tab, loaded at start and "
                   "on refresh (default: $GEOFIDELITY_RESULTS_REPO)")
    p.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL of --results-repo (default: huggingface.co)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only; "
                   "0.0.0.0 exposes it on the network)")
    p.add_argument("--port", type=int, default=None, help="port (default: $GRADIO_SERVER_PORT or 7860)")
    p.add_argument("--open", action="store_true", help="open the app in the default browser")
    p.set_defaults(func=_cmd_app)
