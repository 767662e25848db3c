"""``geofidelity-bench mfp``: Map Feature Perception of generated map tiles against their targets.

Pairs are found by relative path: ``--generated gen/ --targets gt/`` pairs ``gen/r1/t03.png`` with
``gt/r1/t03.png`` (the extension may differ: ``t03.jpg`` pairs with ``t03.png``). An explicit
``--pairs`` CSV with columns ``generated,target`` overrides that. Writes ``mfp.csv`` (one row per
pair), ``summary.json`` (means, model config, parameters, versions) and ``mfp.png``.

Importing this module loads neither torch nor transformers (the command does, when run).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ..provenance import command_line, library_versions, utc_timestamp
from ..atomic import atomic_write
from ._common import CLIError, add_num_workers_arg, resolve_num_workers_arg
from ..mfp import PairingError, pair_folders, read_pairs_csv

def write_plot(path: Path, df) -> None:
    """Histograms of the per-pair terms (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [
        ("global_score", "global score G (higher better)"),
        ("spatial_distance", "spatial distance ||dS||_F (lower better)"),
        ("spatial_mse", "spatial MSE (lower better)"),
        ("loss", "MFP loss (lower better)"),
        ("ssim", "SSIM (higher better)"),
        ("psnr", "PSNR dB, finite pairs (higher better)"),
    ]
    panels = [p for p in panels if p[0] in df.columns]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (col, title) in zip(axes.flat, panels):
        values = np.asarray(df[col], dtype=np.float64)
        values = values[np.isfinite(values)]
        if values.size:
            ax.hist(values, bins=min(30, max(5, values.size)), color="#4C72B0", edgecolor="white")
            ax.axvline(float(values.mean()), color="#C44E52", linestyle="--", label=f"mean {values.mean():.6g}")
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("pairs", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"Map Feature Perception, {len(df)} pair(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")  # explicit: the temporary name ends in .tmp
    plt.close(fig)


def _cmd_mfp(args: argparse.Namespace) -> int:
    from ..encoders import EncoderUnavailableError

    started = time.time()
    try:
        if args.pairs:
            pairs = read_pairs_csv(args.pairs, args.generated, args.targets)
            pairing = "csv"
        else:
            if not args.generated or not args.targets:
                raise CLIError("give --generated and --targets folders (or a --pairs CSV)")
            pairs = pair_folders(args.generated, args.targets)
            pairing = "relative path (extension ignored)"
    except PairingError as err:
        raise CLIError(str(err)) from None
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    resolve_num_workers_arg(args)

    from ..encoders.dino_vit_keys import DinoViTFeatureExtractor
    from ..mfp import mfp_scores, summarize_scores

    try:
        extractor = DinoViTFeatureExtractor(args.model, revision=args.revision, image_size=args.image_size,
                                            device=args.device)
    except (EncoderUnavailableError, ValueError) as err:
        raise CLIError(str(err)) from None
    print(f"MFP: scoring {len(pairs)} pair(s) with {extractor.config['weights']} at {extractor.image_size}px "
          f"on {extractor.device}", file=sys.stderr)
    try:
        df = mfp_scores(
            [g for _, g, _ in pairs], [t for _, _, t in pairs], extractor,
            batch_size=args.batch_size, global_weight=args.global_weight, spatial_weight=args.spatial_weight,
            names=[name for name, _, _ in pairs], target_names=[str(t) for _, _, t in pairs],
            progress=False if args.no_progress else None, num_workers=args.num_workers,
        )
    except ValueError as err:
        raise CLIError(str(err)) from None
    df.insert(1, "generated", [str(g) for _, g, _ in pairs])
    df.insert(2, "target", [str(t) for _, _, t in pairs])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "metric": "Map Feature Perception (MFP), docs/benchmark.md section 10, Map Feature Perception (MFP)",
        "command": command_line(args),
        "created_at": utc_timestamp(),
        **summarize_scores(df),
        "directions": {"global_score": "higher is better (1 = identical CLS)", "spatial_distance": "lower is better",
                       "spatial_mse": "lower is better", "loss": "lower is better", "ssim": "higher is better",
                       "psnr": "higher is better"},
        "image_size": extractor.image_size,
        "model": extractor.config,
        "parameters": {
            **df.attrs["parameters"],
            "pairing": pairing,
            "generated": args.generated,
            "targets": args.targets,
            "pairs_csv": args.pairs,
            "device": extractor.device,
        },
        "ssim": df.attrs["ssim"],
        "psnr": df.attrs["psnr"],
        "n_pixel_resized": df.attrs["n_pixel_resized"],
        "versions": library_versions(),
        "elapsed_s": round(time.time() - started, 2),
        "files": ["mfp.csv", "summary.json", "mfp.png"],
    }
    atomic_write(out / "mfp.csv", lambda p: df.to_csv(p, index=False))
    atomic_write(out / "mfp.png", lambda p: write_plot(p, df))
    atomic_write(out / "summary.json",
                  lambda p: p.write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8"))

    means = summary["means"]
    print(f"pairs            {summary['n_pairs']}")
    for key in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"):
        value = means.get(key)
        print(f"{key:<16} {'n/a' if value is None or math.isnan(value) else f'{value:.4f}'}")
    print(f"\nwrote {out}/mfp.csv, summary.json and mfp.png")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "mfp",
        help="Map Feature Perception (DINO-ViT global + spatial terms, SSIM, PSNR) of generated map tiles vs targets",
        description=(
            "Scores generated map tiles against their targets with MFP (docs/benchmark.md section 10, Map Feature Perception (MFP)): global score "
            "G = 1 - MSE(CLS_gen, CLS_tgt) (higher better), spatial distance ||S_gen - S_tgt||_F and spatial MSE of the "
            "last layer's key self-similarity (lower better), loss = 10 (1 - G) + spatial_mse, plus SSIM and PSNR. "
            "Pairs files by relative path (extension ignored) unless --pairs is given."
        ),
    )
    p.add_argument("--generated", default=None, help="folder of generated images (required unless --pairs)")
    p.add_argument("--targets", default=None, help="folder of target images (required unless --pairs)")
    p.add_argument("--pairs", default=None,
                   help="CSV with columns generated,target (relative paths resolve against --generated/--targets, "
                        "else the CSV's folder); overrides pairing by name")
    p.add_argument("--model", default=None,
                   help="Hub id or local save_pretrained folder of a ViT (default: facebook/dino-vitb8)")
    p.add_argument("--revision", default=None, help="Hub revision of --model")
    p.add_argument("--image-size", type=int, default=224, help="square input side, a multiple of the patch size (default: 224)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", type=int, default=8, help="pairs per forward call (default: 8)")
    p.add_argument("--global-weight", type=float, default=10.0, help="weight of 1 - G in the loss column (default: 10)")
    p.add_argument("--spatial-weight", type=float, default=1.0, help="weight of spatial_mse in the loss column (default: 1)")
    p.add_argument("--out", required=True, help="output folder (mfp.csv, summary.json, mfp.png)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_num_workers_arg(p)
    p.set_defaults(func=_cmd_mfp)
