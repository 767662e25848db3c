# Copyright 2026 The GeoFidelity-Bench authors. MIT License.
"""GeoFidelity: does a text-to-image model draw the named street block, or a generic city?

The Hugging Face ``evaluate`` module of GeoFidelity-Bench. It is a thin wrapper: the scores
come from the ``geofidelity_bench`` package (``evaluation.evaluate_panels`` for the
``default`` config, ``geofidelity_bench.metrics`` for ``sets``); this file declares the inputs
and forwards the call.

The only source of this file ships inside the package
(``geofidelity_bench/evaluate_module/geofidelity/geofidelity.py``, loaded with
``evaluate.load(geofidelity_bench.metric_path())``); ``metric_card/geofidelity/geofidelity.py``
is a copy for the Hugging Face Space, written by ``python scripts/sync_published_files.py``.
"""

from __future__ import annotations

from typing import Any
from typing import Callable
from typing import NamedTuple

import datasets
import evaluate

import geofidelity_bench.metric_module as metric_module  # From: git+https://github.com/YOUR_ORG/geofidelity-bench
from geofidelity_bench.citation import CITATION_BIBTEX  # From: git+https://github.com/YOUR_ORG/geofidelity-bench

_CITATION = CITATION_BIBTEX

_DESCRIPTION = """\
GeoFidelity scores whether generated street-view images look like the street block they were
prompted for, rather than a generic view of the city. Each generated panel (2 or more images
for one target block) is embedded with an image encoder (DINOv2 ViT-B/14 by default) and
compared with the block's real reference gallery and with the galleries of negative blocks
(same neighborhood, same city, same driving side, random city):

- CosSim (higher is better): cosine between the mean generated and mean gallery embeddings.
- MMD² (lower): unbiased RBF-kernel MMD², median-heuristic bandwidth, clamped at 0.
- DCSF (lower): MMD² + 0.5 * max(0, diversity gap); the diversity gap is Div(gallery) - Div(panel).
- GAAS (lower): scene-composition distance from semantic segmentation (NaN without a segmenter).
- Retrieval accuracy and MRR (higher): how often the target's gallery is the nearest candidate.
- sim_* and the local / strongest-negative margins: similarity to each candidate and how far
  the target beats its nearest negatives.

Config "default" scores panels against a benchmark (the embedded demo by default); config
"sets" compares any two sets of images or embeddings (CosSim, MMD², DCSF, diversity gap);
config "mfp" scores generated map tiles against target tiles (Map Feature Perception);
config "geodiv" reports GeoDiv diversity (SEVI ratings, VDI entity/background) per image group.
"""

_KWARGS_DESCRIPTION = """
Args (config "default"):
    predictions: generated images (PIL images, file paths, encoded bytes, HxWxC uint8 arrays)
        or their precomputed raw embeddings (1-D float vectors, or one 2-D array), from the
        same encoder as `encoder`. One computation takes one kind.
    references: the target block id of each prediction (strings); predictions are grouped
        by target block into panels, each needing at least 2 images.
    benchmark: "demo" (default, embedded in the package), a benchmark folder, a Hub dataset
        id ("user/name"), or a geofidelity_bench.Benchmark.
    encoder: encoder name (default "dinov2-base", the reference encoder; it needs its weights
        from the Hub or encoder_weights=<folder>); "efficientnet-lite0" runs offline. Or an
        Encoder object. The encoder is never switched silently.
    encoder_weights: local weights folder (or Hub id) for the encoder; encoder_revision: Hub revision.
    device: torch device (default: cuda if available, else cpu).
    segmenter: None (default: GAAS is NaN and nan_reasons["gaas"] says why), a segmenter name
        ("mask2former-vistas", "segformer-cityscapes") or a Segmenter object;
        segmenter_weights: local weights folder (or Hub id) for it.
    cache_dir: embedding cache folder (default: $GEOFIDELITY_CACHE or under HF_HOME);
        use_cache: False to neither read nor write it.
    method, condition: labels written in the per-block rows (default "submission", "default").
    return_per_block: also return the per-block rows (list of dicts). Default False.
    exclude_copies: score the panels without the predictions the copy audit flags as copies of
        the benchmark's own photos (like `evaluate --exclude-copies`). Default False: they are
        scored, flagged in the result and named in a CopiedImagesWarning.
    batch_size: images per encoder forward call (default 32); progress: show a progress bar.
Args (config "sets"):
    predictions: the generated set; references: the reference set. Each is a list of images
        or of embeddings (or a 2-D embedding array); the two may differ in length (each >= 2).
    encoder, encoder_weights, encoder_revision, device, cache_dir, use_cache, batch_size,
    progress: as above; the encoder is built only if a set holds images.
Args (config "mfp"):
    predictions: generated map images; references: their target map images, paired by position.
    model: DINO ViT Hub id or local folder (default "facebook/dino-vitb8"); image_size (224),
    device, batch_size (8), revision, global_weight (10), spatial_weight (1), pixel_metrics (True),
    resize_pixel_metrics (False: pairs of different sizes are refused; True: the generated image
    is resized to its target's size for SSIM/PSNR and the pair marked pixel_resized in per_pair).
Args (config "geodiv"):
    predictions: images; references: the group label of each image (country, city, model, ...).
    vqa_model: Hub id or local folder of a transformers image-text-to-text model (default
    "HuggingFaceTB/SmolVLM-256M-Instruct"), or a built geofidelity_bench.geodiv.VQABackend;
    question_bank: JSON/YAML path (default: the shipped street-scene bank); device; cache_dir
    (VQA answer cache), use_cache; vqa_revision, dtype, batch_size, max_new_tokens,
    max_image_side; group_name ("group"); return_answers (False).
Returns (config "default"):
    cos_sim, mmd, dcsf, diversity_gap, gaas, retrieval_acc, mrr, sim_target,
    sim_same_neighborhood, sim_same_city, sim_same_driving_side, sim_random_city,
    local_margin, strongest_margin: means over blocks (NaN-skipping);
    n_blocks, n_images, benchmark, benchmark_fingerprint, method, condition, input_kind,
    encoder, encoder_config, encoder_config_hash, segmenter, segmenter_config,
    gaas_unavailable_reason, nan_reasons ({column: [reasons]}), and per_block if asked;
    the copy audit of `evaluate` (every prediction against every photo of the benchmark):
    copy_audit (settings, and images: one record per prediction in input order with index,
    nearest photo, hash distance, cosine, exact, flagged), near_copies (the flagged records)
    and n_copied (how many; a warning names them).
Returns (config "sets"):
    cos_sim, mmd, dcsf, diversity_gap, diversity_predictions, diversity_references,
    n_predictions, n_references, input_kind, encoder, encoder_config, encoder_config_hash,
    nan_reasons.
Returns (config "mfp"):
    global_score (higher better, 1 = identical), spatial_distance, spatial_mse, loss (lower
    better), ssim, psnr: means over pairs; n_pairs, per_pair ({column: [values]}), config.
Returns (config "geodiv"):
    per_group (list of dicts: n_images, affluence_mean, affluence_diversity, maintenance_mean,
    maintenance_diversity, entity_diversity, background_diversity, ...), per_question, dropped,
    group_by, question_bank, n_images, n_unparseable, vqa_model, vqa_config, vqa_config_hash,
    answer_stats (and answers if asked).
Examples:
    >>> import evaluate
    >>> import geofidelity_bench
    >>> geofidelity = evaluate.load(geofidelity_bench.metric_path())
    >>> bench = geofidelity_bench.load_benchmark("demo")
    >>> images = [r.image_bytes for b in ("lund_seg1", "lund_seg2") for r in bench.heldout(b)]
    >>> targets = [b for b in ("lund_seg1", "lund_seg2") for _ in bench.heldout(b)]
    >>> results = geofidelity.compute(predictions=images, references=targets, encoder="efficientnet-lite0")
    >>> results["n_blocks"], results["n_images"], results["retrieval_acc"]
    (2, 8, 1.0)
"""

#: One stored prediction or reference: an image or an embedding (see metric_module.to_item).
_ITEM = {
    "image": datasets.Image(decode=False),
    "embedding": datasets.Sequence(datasets.Value("float32")),
}


class _Config(NamedTuple):
    """One config: what is stored, how raw inputs become that, and what computes the scores."""

    features: datasets.Features
    normalize: Callable[[Any, Any], tuple]
    compute: Callable[..., dict]


# Adding a config ("geodiv", "mfp", ...) is one entry here.
_CONFIGS = {
    "default": _Config(
        features=datasets.Features({"predictions": _ITEM, "references": datasets.Value("string")}),
        normalize=metric_module.normalize_default_batch,
        compute=metric_module.compute_default,
    ),
    "sets": _Config(
        features=datasets.Features({"predictions": _ITEM, "references": _ITEM}),
        normalize=metric_module.normalize_sets_batch,
        compute=metric_module.compute_sets,
    ),
    "mfp": _Config(
        features=datasets.Features({"predictions": _ITEM, "references": _ITEM}),
        normalize=metric_module.normalize_pairs_batch,
        compute=metric_module.compute_mfp,
    ),
    "geodiv": _Config(
        features=datasets.Features({"predictions": _ITEM, "references": datasets.Value("string")}),
        normalize=metric_module.normalize_geodiv_batch,
        compute=metric_module.compute_geodiv,
    ),
}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Geofidelity(evaluate.Metric):
    """GeoFidelity-Bench scores as an evaluate metric (configs: "default", "sets", "mfp", "geodiv")."""

    def _config(self) -> _Config:
        name = self.config_name or metric_module.DEFAULT_CONFIG
        if name not in _CONFIGS:
            raise ValueError(f"unknown geofidelity config {name!r}; available configs: {sorted(_CONFIGS)}")
        return _CONFIGS[name]

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=self._config().features,
            homepage="https://arxiv.org/abs/2606.23669",
            codebase_urls=["https://github.com/YOUR_ORG/geofidelity-bench"],
            reference_urls=["https://arxiv.org/abs/2606.23669"],
        )

    # Raw images and embeddings are turned into the stored struct before evaluate's writer
    # sees them, so both kinds share one declared feature and nothing is re-compressed.
    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Adds a batch of predictions and references (images or embeddings; see the inputs below)."""
        predictions, references = self._config().normalize(predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Adds one prediction and its reference (an image or an embedding; see the inputs below)."""
        predictions, references = self._config().normalize(
            None if prediction is None else [prediction], None if reference is None else [reference]
        )
        if len(predictions) != 1 or len(references) != 1:
            raise ValueError("add() takes one prediction and one reference; use add_batch() for lists")
        return super().add(prediction=predictions[0], reference=references[0], **kwargs)

    def _compute(self, predictions, references, **kwargs):
        resources = getattr(self, "_resources", None)
        if resources is None:
            resources = self._resources = metric_module.MetricResources()
        return self._config().compute(predictions, references, resources=resources, **kwargs)
