"""Run under ``accelerate launch --num_processes 2``: embeds images with embed_distributed.

Every rank writes ``rank<i>.json`` (who it was) and ``emb_rank<i>.npy`` (the full gathered
array it returned) into --out, so the test can check that two processes really ran and that
each got the whole result.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState

from geofidelity_bench.encoders import EmbeddingCache, embed_distributed, get_encoder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--encoder", default="dinov2-base")
    parser.add_argument("--weights", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("images", nargs="+")
    args = parser.parse_args()

    state = PartialState(cpu=not torch.cuda.is_available())
    encoder = get_encoder(args.encoder, weights=args.weights, device=state.device)
    out = Path(args.out)
    emb = embed_distributed(encoder, args.images, cache=EmbeddingCache(args.cache), batch_size=args.batch_size)
    np.save(out / f"emb_rank{state.process_index}.npy", emb)
    marker = {
        "process_index": state.process_index,
        "num_processes": state.num_processes,
        "pid": os.getpid(),
        "device": str(state.device),
        "config_hash": encoder.config_hash,
    }
    (out / f"rank{state.process_index}.json").write_text(json.dumps(marker))
    state.wait_for_everyone()


if __name__ == "__main__":
    main()
