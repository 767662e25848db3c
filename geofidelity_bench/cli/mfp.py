"""``geofidelity-bench mfp``: Map Feature Perception of generated map tiles against their targets.

Pairs are found by relative path: ``--generated gen/ --targets gt/`` pairs ``gen/r1/t03.png`` with
``gt/r1/t03.png`` (the extension may differ: ``t03.jpg`` pairs with ``t03.png``). An explicit
``--pairs`` CSV with columns ``generated,target`` overrides that. Writes ``mfp.csv`` (one row per
pair), ``summary.json`` (means, model config, parameters, versions) and ``mfp.png``
(:func:`geofidelity_bench.mfp.write_mfp_folder`).

Importing this module loads neither torch nor transformers (the command does, when run).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from ..provenance import command_line
from ._common import CLIError, add_batch_size_arg, add_num_workers_arg, resolve_num_workers_arg
from ..mfp import PairingError, PixelSizeError, check_pixel_sizes, pair_folders, read_pairs_csv


def summary_text(summary: dict) -> str:
    """The dataset means the command prints, one line per score: its mean (6 significant digits, so
    that a G of 0.99998 does not read 1.0000) and its direction (docs/benchmark.md section 10, from
    the metric catalog)."""
    from ..metrics.catalog import METRICS

    means = summary["means"]
    lines = [f"pairs            {summary['n_pairs']}"]
    for key in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"):
        if key not in means:
            continue
        value = means.get(key)
        shown = "n/a" if value is None or math.isnan(value) else f"{value:.6g}"
        lines.append(f"{key:<16} {shown:<12} {METRICS[key].direction}")
    return "\n".join(lines)


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
    resolve_num_workers_arg(args)
    if not args.no_pixel_metrics:  # sizes from the image headers, before the model is loaded
        try:
            check_pixel_sizes([g for _, g, _ in pairs], [t for _, _, t in pairs], [n for n, _, _ in pairs],
                              resize_pixel_metrics=args.resize_pixel_metrics)
        except PixelSizeError as err:
            raise CLIError(str(err)) from None

    from ..encoders.dino_vit_keys import DinoViTFeatureExtractor
    from ..mfp import RESIZE_NOTE, mfp_scores, write_mfp_folder

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
            pixel_metrics=not args.no_pixel_metrics, resize_pixel_metrics=args.resize_pixel_metrics,
            names=[name for name, _, _ in pairs], target_names=[str(t) for _, _, t in pairs],
            progress=False if args.no_progress else None, num_workers=args.num_workers,
        )
    except ValueError as err:
        raise CLIError(str(err)) from None
    out = Path(args.out)
    summary = write_mfp_folder(df, pairs, out, extractor=extractor, pairing=pairing, generated=args.generated,
                               targets=args.targets, pairs_csv=args.pairs, command=command_line(args), started=started)

    print(summary_text(summary))
    if summary.get("psnr_infinite_pairs"):
        print(f"psnr: mean over {summary['n_pairs'] - summary['psnr_infinite_pairs']} finite pair(s); "
              f"{summary['psnr_infinite_pairs']} identical pair(s) have PSNR = inf")
    if args.no_pixel_metrics:
        print("ssim, psnr       not computed (--no-pixel-metrics)")
    else:
        n_resized = summary["n_pixel_resized"]
        print(f"resized          {n_resized} of {summary['n_pairs']} pair(s) for SSIM/PSNR"
              + (f" (marked in the pixel_resized column: {RESIZE_NOTE})" if n_resized else ""))
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
            "Pairs files by relative path (extension ignored) unless --pairs is given. SSIM and PSNR need a "
            "generated image and its target of equal size: pairs of different sizes are refused, naming them, "
            "unless --resize-pixel-metrics (or --no-pixel-metrics)."
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
    add_batch_size_arg(p, 8, "pairs per forward call")
    p.add_argument("--global-weight", type=float, default=10.0, help="weight of 1 - G in the loss column (default: 10)")
    p.add_argument("--spatial-weight", type=float, default=1.0, help="weight of spatial_mse in the loss column (default: 1)")
    p.add_argument("--resize-pixel-metrics", action="store_true",
                   help="for pairs of different sizes, compute SSIM/PSNR after resizing the generated image to its "
                        "target's size (bicubic); such rows are marked pixel_resized=True and counted in summary.json "
                        "(default: such pairs are an error)")
    p.add_argument("--no-pixel-metrics", action="store_true", help="leave out SSIM and PSNR (MFP terms only)")
    p.add_argument("--out", required=True, help="output folder (mfp.csv, summary.json, mfp.png)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_num_workers_arg(p)
    p.set_defaults(func=_cmd_mfp)
