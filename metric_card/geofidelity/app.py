"""Gradio app of the ``geofidelity`` metric Space: pick a demo block, upload images, see the scores.

``evaluate.utils.launch_gradio_widget`` builds its form from ``gr.inputs`` (gone since
Gradio 4) and launches at once, so this small app calls the same metric instead: the module
file next to this one, loaded with ``evaluate.load`` on first use. Run locally with
``python app.py`` (never shared publicly from here).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from geofidelity_bench.metrics.catalog import RESULT_METRICS  # noqa: E402

HERE = Path(__file__).resolve().parent
MODULE_FILE = HERE / "geofidelity.py"
ENCODERS = ("dinov2-base", "efficientnet-lite0", "clip-vit-b32", "siglip-so400m")
DEFAULT_ENCODER = "dinov2-base"
#: (output key, label, direction) of the scores shown in the table, from the package's metric catalog.
SHOWN = tuple((m.column, m.label, m.direction) for m in RESULT_METRICS)

# The metric keeps state between add_batch and compute; one computation at a time.
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def load_metric():
    """The metric module next to this file (``evaluate`` is imported here, on first use)."""
    import evaluate

    return evaluate.load(str(MODULE_FILE), keep_in_memory=True)  # no files or locks left behind by a failed run


@functools.lru_cache(maxsize=1)
def demo_benchmark():
    from geofidelity_bench import load_benchmark

    return load_benchmark("demo")


def block_choices() -> list[tuple[str, str]]:
    """(label, block_id) pairs of the demo blocks for the dropdown."""
    out = []
    for block in demo_benchmark().blocks:
        where = ", ".join(x for x in (block.street_name, block.neighborhood, block.city_name) if x)
        out.append((f"{block.block_id} ({where})" if where else block.block_id, block.block_id))
    return out


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def scores_markdown(result: dict[str, Any]) -> str:
    """A markdown table of the scores, with direction and the NaN reasons."""
    lines = [
        f"**{result.get('n_images', '?')} image(s)** vs block(s) of benchmark `{result.get('benchmark', '?')}`, "
        f"encoder `{result.get('encoder', '?')}`",
        "",
        "| score | value | direction |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {label} | {_fmt(result.get(key))} | {direction} |" for key, label, direction in SHOWN if key in result]
    copies = result.get("near_copies") or []
    if copies:  # the copy audit flagged uploads (docs/benchmark.md section 5, Copy audit)
        lines += ["", f"**⚠ copied: {len(copies)} of {result.get('n_images', '?')} image(s) are copies of the "
                      "benchmark's own photos**; these scores are those of real photos of the block, not of a "
                      "model's images:"]
        lines += [f"- `{r['file']}` = photo `{r['reference_id']}` of "
                  f"{'the world pool' if r['reference_block_id'] == 'world' else 'block ' + str(r['reference_block_id'])}"
                  for r in copies[:10]]
    reasons = result.get("nan_reasons") or {}
    if reasons:
        lines += ["", "n/a because:"]
        lines += [f"- `{col}`: {'; '.join(why)}" for col, why in reasons.items()]
    return "\n".join(lines)


def _score(images: list, block_id: str, encoder: str, method: str, condition: str = "space") -> tuple[str, dict]:
    if not block_id:
        raise gr.Error("Choose a target block.")
    try:
        with _LOCK:
            result = load_metric().compute(
                predictions=images, references=[block_id] * len(images), benchmark="demo", encoder=encoder,
                method=method, condition=condition,
            )
    except (ValueError, RuntimeError, OSError) as err:  # bad input or unavailable weights: show the message
        raise gr.Error(str(err)) from err
    shown = {k: v for k, v in result.items() if k != "encoder_config"}
    return scores_markdown(result), shown


def score_uploads(block_id: str, files: list | None, encoder: str) -> tuple[str, dict]:
    paths = [f if isinstance(f, str) else getattr(f, "name", f) for f in (files or [])]
    if len(paths) < 2:
        raise gr.Error("Upload at least 2 generated images of the target block (a panel).")
    return _score(paths, block_id, encoder, "upload")


def score_heldout(block_id: str, encoder: str) -> tuple[str, dict]:
    """The block's held-out real photos, cycled to 4 (the ``heldout_real`` anchor): near the top."""
    from geofidelity_bench.evaluation import anchor_panels

    panel = anchor_panels(demo_benchmark())[("heldout_real", "anchor", block_id)]
    # Under the anchors' own condition: the name heldout_real is reserved for it (docs/benchmark.md section 6).
    return _score([ref.image_bytes for ref in panel], block_id, encoder, "heldout_real", "anchor")


def build_demo() -> gr.Blocks:
    """The Blocks UI (building it loads neither evaluate nor an encoder)."""
    choices = block_choices()
    with gr.Blocks(title="GeoFidelity metric") as demo:
        gr.Markdown(
            "# GeoFidelity\n"
            "Does a text-to-image model draw the **named street block**, or a generic city? Pick a block of the "
            "embedded demo benchmark, upload 2 or more images generated for it, and compare them with the block's "
            "real photos and with the photos of nearby and distant negative blocks. See the metric card for what "
            "each score means; scores are comparable with the paper only under `dinov2-base`."
        )
        with gr.Row():
            block = gr.Dropdown(choices=choices, value=choices[0][1] if choices else None, label="Target block")
            encoder = gr.Dropdown(choices=list(ENCODERS), value=DEFAULT_ENCODER, label="Encoder")
        files = gr.File(file_count="multiple", file_types=["image"], label="Generated images (2 or more)")
        with gr.Row():
            run = gr.Button("Score uploaded images", variant="primary")
            sanity = gr.Button("Score the block's held-out real photos")
        table = gr.Markdown()
        raw = gr.JSON(label="Full output")
        run.click(score_uploads, inputs=[block, files, encoder], outputs=[table, raw], concurrency_limit=1)
        sanity.click(score_heldout, inputs=[block, encoder], outputs=[table, raw], concurrency_limit=1)
    return demo


if __name__ == "__main__":
    build_demo().launch()
