"""A tiny Stable Diffusion pipeline with random weights, built fully offline.

It runs the real diffusers code path (CLIP text encoder, classifier-free guidance with a
negative prompt, DDIM scheduler, UNet, VAE decoder) at 64x64 px in 2 steps, in well under a
second per image on one CPU core, so that tests and smoke runs exercise the whole generation
harness without downloading anything. Its pictures are coloured noise, not street scenes.

Weights are drawn from ``torch.manual_seed(0)`` before each component is built, so every
process on every machine with the same torch version builds the same pipeline. The tokenizer
is a byte-level CLIP BPE with one token per byte (and per end-of-word byte) and no merges,
written as ``vocab.json``/``merges.txt`` to a temporary folder and loaded from there.
"""

from __future__ import annotations

import json
import os
import tempfile

from ..extras import require

TINY_SIZE = 64
# One token per byte: 512 positions hold every benchmark prompt whole (no truncation warnings).
TINY_MAX_TOKENS = 512


def _bytes_to_unicode() -> list[str]:
    """The byte -> printable character table of GPT-2/CLIP byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def tiny_vocab() -> dict[str, int]:
    chars = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def build_tiny_tokenizer():
    from transformers import CLIPTokenizer

    vocab = tiny_vocab()
    with tempfile.TemporaryDirectory(prefix="geofidelity-tiny-tok-") as folder:
        with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as fh:
            json.dump(vocab, fh)
        with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as fh:
            fh.write("#version: 0.2\n")
        return CLIPTokenizer.from_pretrained(folder, model_max_length=TINY_MAX_TOKENS)


def build_tiny_pipeline():
    """A ``StableDiffusionPipeline`` with tiny random components (fp32, CPU)."""
    import torch

    require("diffusers", "gen", "the tiny generator")
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = build_tiny_tokenizer()
    vocab_size = len(tiny_vocab())
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    start = tokenizer.convert_tokens_to_ids("<|startoftext|>")
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=TINY_SIZE // 2,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=32,
    )
    torch.manual_seed(0)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=(32, 64),
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        norm_num_groups=32,
        sample_size=TINY_SIZE,
    )
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            max_position_embeddings=TINY_MAX_TOKENS,
            layer_norm_eps=1e-5,
            bos_token_id=start,
            eos_token_id=end,
            pad_token_id=end,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        unet=unet.eval(),
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
