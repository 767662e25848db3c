"""The ``datasets`` builder of GeoFidelity-Bench: a canonical benchmark folder -> typed configs.

A small ``GeneratorBasedBuilder`` in the style of ``datasets``' ImageFolder builder: it reads a
canonical benchmark folder (``demo``, a folder written by ``save_benchmark``/``curate``, a Hub
dataset id, or the output of ``geofidelity-bench import-release``) and yields the rows of one
config with the features of :func:`geofidelity_bench.benchmark.features` (``blocks``,
``references``, ``cities``, ``world``) or of the generation manifest plus ``Image()``
(``generations``). The rows are exactly those that ``geofidelity-bench build-dataset`` writes to
Parquet (both use :mod:`geofidelity_bench.hub`), so the two paths give the same dataset.

datasets 5.x has no loading scripts: use the class directly::

    from builder import GeoFidelityBench   # dataset_builder/ on sys.path

    builder = GeoFidelityBench(config_name="references", data_dir="path/to/benchmark",
                               cache_dir="/tmp/hf-cache")
    builder.download_and_prepare()
    references = builder.as_dataset(split="train")

    gens = GeoFidelityBench(config_name="generations", data_dir="path/to/benchmark",
                            generations_dir="path/to/generated_panels")

``data_dir`` defaults to ``demo`` (the embedded demo benchmark). For publishing, prefer
``geofidelity-bench build-dataset`` (streams Parquet shards, fills the dataset card) and
``geofidelity-bench push-dataset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets

from geofidelity_bench.citation import ARXIV_URL, CITATION_BIBTEX
from geofidelity_bench.hub import DATASET_CONFIGS, config_features, iter_config_rows

_CITATION = CITATION_BIBTEX

_DESCRIPTION = {
    "blocks": "Named OpenStreetMap street blocks with geometry, strata and four retrieval negatives.",
    "references": "Real street-level reference images, one row per block-image assignment, with attribution.",
    "cities": "Cities of the benchmark: key, display name, ISO-2 country, center, driving side.",
    "world": "A distractor pool of single street-level photos from all over the world.",
    "generations": "Generated panels: one row per image with its prompt, seed and generation settings.",
}

_LICENSE = (
    "Reference images: CC BY-SA 4.0 (attribution per row); OSM-derived block metadata: ODbL 1.0, "
    "(c) OpenStreetMap contributors; generated images: the terms of their source model; code: MIT."
)


@dataclass
class GeoFidelityBenchConfig(datasets.BuilderConfig):
    """One config of the dataset; ``generations_dir`` points at a panels folder (``generations`` only)."""

    generations_dir: str | None = None


class GeoFidelityBench(datasets.GeneratorBasedBuilder):
    """Builds the ``blocks``, ``references``, ``cities``, ``world`` and ``generations`` configs."""

    BUILDER_CONFIG_CLASS = GeoFidelityBenchConfig
    BUILDER_CONFIGS = [
        GeoFidelityBenchConfig(name=name, version=datasets.Version("3.1.0"), description=_DESCRIPTION[name])
        for name in DATASET_CONFIGS
    ]
    DEFAULT_CONFIG_NAME = "references"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=_DESCRIPTION[self.config.name],
            features=config_features(self.config.name),
            homepage=ARXIV_URL,
            license=_LICENSE,
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager):
        return [
            datasets.SplitGenerator(
                name=datasets.Split.TRAIN,
                gen_kwargs={"source": self.config.data_dir or "demo", "generations": self.config.generations_dir},
            )
        ]

    def _generate_examples(self, source, generations):
        for index, row in enumerate(iter_config_rows(source, self.config.name, generations)):
            yield index, row
