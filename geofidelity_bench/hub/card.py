"""The dataset card (``README.md`` of the dataset repo) and its license file.

The card template and the license text ship inside the package
(``geofidelity_bench/hub/dataset_card/README.md`` and ``LICENSE.md``): they are the only
source, whether the package runs from a checkout or from a wheel. ``dataset_builder/`` at the
top of the repository holds copies written by ``python scripts/sync_published_files.py``.

:func:`render_card` fills a template: the YAML ``configs``, ``dataset_info`` (features and
split sizes) and ``size_categories``, and the counts table between the
``<!-- geofidelity:counts:start/end -->`` markers. :func:`update_readme` adds the
``generations`` config to the README of a repo that another push made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..benchmark import Benchmark
from .configs import DATASET_CONFIGS, GENERATIONS_CONFIG, GENERATIONS_DIR, config_features
from .requests import HubPushError

CARD_FILE = "README.md"
LICENSE_FILE = "LICENSE.md"
COUNTS_START = "<!-- geofidelity:counts:start -->"
COUNTS_END = "<!-- geofidelity:counts:end -->"
#: The folder of the package data: the card template and the license text.
CARD_DIR = Path(__file__).resolve().parent / "dataset_card"


def default_card_template() -> Path:
    """The dataset card template shipped with the package."""
    return CARD_DIR / CARD_FILE


def default_license() -> Path:
    """The license text shipped with the package (``LICENSE.md`` of every built folder)."""
    return CARD_DIR / LICENSE_FILE


# -- YAML front matter ----------------------------------------------------------------------------


def split_front_matter(text: str | None) -> tuple[dict[str, Any], str]:
    """``(yaml_metadata, body)`` of a README (empty metadata when it has none)."""
    import yaml

    if not text:
        return {}, ""
    if text.startswith("---"):
        lines = text.splitlines(keepends=True)
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                meta = yaml.safe_load("".join(lines[1:i])) or {}
                if not isinstance(meta, dict):
                    raise HubPushError("the repo's README.md YAML header is not a mapping; fix it by hand first")
                return meta, "".join(lines[i + 1 :])
    return {}, text


def join_front_matter(meta: Mapping[str, Any], body: str, *, width: int | None = 1000) -> str:
    """The README text of ``meta`` and ``body`` (the inverse of :func:`split_front_matter`)."""
    import yaml

    kwargs = {"width": width} if width else {}
    header = yaml.safe_dump(dict(meta), sort_keys=False, allow_unicode=True, **kwargs)
    return f"---\n{header}---\n{body if body.startswith(chr(10)) else chr(10) + body}"


# -- the card of a built folder -------------------------------------------------------------------


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def config_entry(config: str) -> dict[str, Any]:
    """The ``configs:`` entry of a config (the ``generations`` config spans every model's folder)."""
    path = f"{GENERATIONS_DIR}/*/*.parquet" if config == GENERATIONS_CONFIG else f"{config}/*.parquet"
    return {"config_name": config, "data_files": [{"split": "train", "path": path}]}


def dataset_info_yaml(infos: Mapping[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """The card's ``dataset_info`` list: features and train split size of each config."""
    from datasets.info import DatasetInfo, DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo
    from huggingface_hub import DatasetCardData

    dicts = DatasetInfosDict()
    for config, (n_rows, nbytes) in infos.items():
        splits = SplitDict()
        splits.add(SplitInfo(name="train", num_bytes=int(nbytes), num_examples=int(n_rows)))
        dicts[config] = DatasetInfo(features=config_features(config), splits=splits, config_name=config)
    card = DatasetCardData()
    dicts.to_dataset_card_data(card)
    info = card.to_dict()["dataset_info"]
    return info if isinstance(info, list) else [info]


def _fmt(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def counts_markdown(stats: Mapping[str, Any]) -> str:
    """The counts table of the card (between the COUNTS_START / COUNTS_END markers)."""
    lines = [
        "| | count |",
        "| :-- | --: |",
        f"| cities | {_fmt(stats['n_cities'])} |",
        f"| countries | {_fmt(stats['n_countries'])} |",
        f"| street blocks | {_fmt(stats['n_blocks'])} |",
        f"| reference assignments (`references` rows) | {_fmt(stats['n_references'])} |",
        f"| distinct reference images | {_fmt(stats['n_distinct_images'])} |",
        f"| references per block (min / mean / max) | {stats['refs_min']} / {stats['refs_mean']:.1f} / {stats['refs_max']} |",
        f"| held-out real queries / gallery images | {_fmt(stats['n_heldout'])} / {_fmt(stats['n_gallery'])} |",
    ]
    cov = stats["negatives_coverage"]
    lines.append(
        "| blocks with each negative (same neighborhood / same city / same driving side / random city) | "
        + " / ".join(str(cov[k]) for k in ("same_neighborhood", "same_city", "same_driving_side", "random_city"))
        + " |"
    )
    if stats.get("n_world"):
        lines.append(f"| world distractor pool (`world` rows) | {_fmt(stats['n_world'])} |")
    if stats.get("n_generated"):
        models = ", ".join(f"`{m}`" for m in stats["models"])
        conds = ", ".join(f"`{c}`" for c in stats["conditions"])
        lines.append(f"| generated images (`generations` rows) | {_fmt(stats['n_generated'])} |")
        lines.append(f"| generators | {len(stats['models'])}: {models} |")
        lines.append(f"| prompt conditions | {len(stats['conditions'])}: {conds} |")
    lines.append("")
    lines.append(f"Benchmark fingerprint (sha256 of blocks and reference images): `{stats['fingerprint']}`.")
    return "\n".join(lines)


def render_card(
    template: str,
    stats: Mapping[str, Any],
    infos: Mapping[str, tuple[int, int]],
) -> str:
    """Fills a card template: YAML ``configs``/``dataset_info``/``size_categories`` and the counts.

    Every other YAML key (license, tags, ...) and the body are kept. ``infos`` maps each config
    present to ``(rows, arrow_bytes)``.
    """
    meta, body = split_front_matter(template)
    meta["configs"] = [config_entry(c) for c in DATASET_CONFIGS if c in infos]
    meta["dataset_info"] = dataset_info_yaml({c: infos[c] for c in DATASET_CONFIGS if c in infos})
    meta["size_categories"] = [size_category(sum(n for n, _ in infos.values()))]
    table = counts_markdown(stats)
    if COUNTS_START in body and COUNTS_END in body:
        head, rest = body.split(COUNTS_START, 1)
        _, tail = rest.split(COUNTS_END, 1)
        body = f"{head}{COUNTS_START}\n{table}\n{COUNTS_END}{tail}"
    else:
        body = f"{body.rstrip()}\n\n## Counts\n\n{COUNTS_START}\n{table}\n{COUNTS_END}\n"
    return join_front_matter(meta, body)


def benchmark_stats(benchmark: Benchmark, manifest=None) -> dict[str, Any]:
    """Counts shown in the card (and returned by :func:`~geofidelity_bench.hub.build_dataset`)."""
    summary = benchmark.summary()
    refs = [b["n_references"] for b in summary["blocks"]]
    stats: dict[str, Any] = {
        "name": benchmark.name,
        "fingerprint": benchmark.fingerprint,
        "n_cities": summary["n_cities"],
        "n_countries": len({c.country for c in benchmark.cities.values()}),
        "n_blocks": summary["n_blocks"],
        "n_references": summary["n_references"],
        "n_distinct_images": summary["n_distinct_images"],
        "refs_min": min(refs),
        "refs_mean": sum(refs) / len(refs),
        "refs_max": max(refs),
        "n_heldout": sum(b["n_heldout"] for b in summary["blocks"]),
        "n_gallery": sum(b["n_gallery"] for b in summary["blocks"]),
        "negatives_coverage": summary["negatives_coverage"],
        "n_world": summary["n_world"],
        "n_generated": 0,
        "models": [],
        "conditions": [],
    }
    if manifest is not None and len(manifest):
        stats["n_generated"] = int(len(manifest))
        stats["models"] = sorted(manifest["model"].unique())
        stats["conditions"] = sorted(manifest["condition"].unique())
    return stats


# -- the README of a repo that already exists -----------------------------------------------------


def generations_config_entry() -> dict[str, Any]:
    return config_entry(GENERATIONS_CONFIG)


def update_readme(text: str | None, repo_files: Sequence[str] = ()) -> str:
    """The README with a ``generations`` entry in ``configs:``, every other entry kept.

    When the README declares no ``configs:`` at all, the repo's other top-level folders of
    Parquet files are declared too (``{folder}/*.parquet``), so that adding the first explicit
    config does not hide data that the Hub used to discover by itself.
    """
    meta, body = split_front_matter(text)
    configs = meta.get("configs")
    if configs is None:
        folders = sorted(
            {
                f.split("/", 1)[0]
                for f in repo_files
                if f.endswith(".parquet") and "/" in f and f.split("/", 1)[0] != GENERATIONS_DIR
            }
        )
        configs = [config_entry(d) for d in folders]
    if not isinstance(configs, list):
        raise HubPushError("the repo's README.md has a 'configs' field that is not a list; fix it by hand first")
    configs = [c for c in configs if not (isinstance(c, dict) and c.get("config_name") == GENERATIONS_CONFIG)]
    configs.append(generations_config_entry())
    meta["configs"] = configs
    if not body.strip():
        body = (
            "\n# Generated panels\n\n"
            "The `generations` config holds GeoFidelity-Bench panels: one row per generated image, with "
            "the image, its prompt, seed, generation settings and library versions.\n"
        )
    return join_front_matter(meta, body, width=None)


def card_with_foreign_generations(card: str, remote_files: Sequence[str]) -> str:
    """The card for a repo that also holds generations of models this build does not have.

    Those generations (pushed earlier, e.g. by ``push-generations``) stay declared in
    ``configs``, and the ``generations`` size is dropped from ``dataset_info`` since this build
    does not know it (a wrong ``num_examples`` would make ``load_dataset`` fail its check).
    """
    meta, body = split_front_matter(update_readme(card, remote_files))
    info = meta.get("dataset_info")
    if isinstance(info, list):
        meta["dataset_info"] = [i for i in info if not (isinstance(i, dict) and i.get("config_name") == GENERATIONS_CONFIG)]
    return join_front_matter(meta, body)


__all__ = [
    "CARD_DIR",
    "CARD_FILE",
    "COUNTS_END",
    "COUNTS_START",
    "LICENSE_FILE",
    "benchmark_stats",
    "card_with_foreign_generations",
    "config_entry",
    "counts_markdown",
    "dataset_info_yaml",
    "default_card_template",
    "default_license",
    "generations_config_entry",
    "join_front_matter",
    "render_card",
    "size_category",
    "split_front_matter",
    "update_readme",
]
