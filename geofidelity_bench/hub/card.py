"""The dataset card (``README.md`` of the dataset repo) and its license file.

The card template and the license text ship inside the package
(``geofidelity_bench/hub/dataset_card/README.md`` and ``LICENSE.md``): they are the only
source, whether the package runs from a checkout or from a wheel. ``dataset_builder/`` at the
top of the repository holds copies written by ``python scripts/sync_published_files.py``.

:func:`render_card` fills a template: the YAML ``configs``, ``dataset_info`` (features and
split sizes) and ``size_categories``, and the parts of the body written from the data between
``<!-- geofidelity:NAME:start -->`` / ``<!-- geofidelity:NAME:end -->`` markers: ``counts`` (the
counts table), ``contents`` (what the folder holds: cities, countries, sources), ``coverage``
(its cities and countries), ``sources`` (images per source and license), ``release`` (the
published release's curation steps, kept only in a build of the release; a benchmark made by
``curate`` gets its own curation provenance from its ``curation_summary.json``, see
:func:`render_card`), ``filters`` (the bias items of the filters that ran) and ``generators``
(the terms of the generators whose images the build holds, nothing without a ``generations``
config). :func:`fill_repo_id` writes the repository id into the card's examples
at push time. :func:`update_readme` adds the
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
#: The placeholder of the card's examples, replaced by the repository id at push time.
REPO_ID_PLACEHOLDER = "REPO_ID"
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
    kinds = stats.get("same_neighborhood_kinds")
    if kinds and cov.get("same_neighborhood"):
        from ..caveats import same_neighborhood_counts_text

        lines.append(f"| same-neighborhood negatives by kind (`neg_same_neighborhood_kind`) | "
                     f"{same_neighborhood_counts_text(kinds)} |")
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


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- geofidelity:{name}:start -->", f"<!-- geofidelity:{name}:end -->"


def _fill(body: str, name: str, text: str, *, block: bool = True) -> str:
    """``body`` with the text between the ``name`` markers replaced (unchanged when it has none)."""
    start, end = _markers(name)
    if start not in body or end not in body:
        return body
    head, rest = body.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{text}\n{end}{tail}" if block else f"{head}{start}{text}{end}{tail}"


def _cities_phrase(stats: Mapping[str, Any]) -> str:
    cities = ", ".join(f"{name} ({country})" for name, country in stats["cities"])
    return (f"{stats['n_cities']} {'city' if stats['n_cities'] == 1 else 'cities'} in {stats['n_countries']} "
            f"{'country' if stats['n_countries'] == 1 else 'countries'}: {cities}")


def contents_markdown(stats: Mapping[str, Any], *, release: bool = False) -> str:
    """What the folder holds, from its data: benchmark, blocks, cities and countries, photo sources."""
    sources = sorted({s["source"] for s in stats["sources"]})
    licenses = sorted({s["license"] for s in stats["sources"]})
    what = "The published GeoFidelity-Bench release" if release else f"Benchmark `{stats['name']}`"
    text = (f"{what}: {stats['n_blocks']} street blocks in {_cities_phrase(stats)}. Its photographs come from "
            f"{', '.join(sources) or 'no source'} under {', '.join(licenses) or 'no stated license'} (per source "
            "under *Licenses* below).")
    if stats.get("n_generated"):
        text += f" It also holds {stats['n_generated']:,} generated images of {len(stats['models'])} model(s)."
    return text


def other_filters_markdown() -> str:
    """The card's filter bias item for a benchmark whose curation this folder does not record."""
    return ("- **Filters and encoders**: how this benchmark's photographs were chosen is not recorded in this folder "
            "(no `curation_summary.json`); scores depend on the encoder (DINOv2 ViT-B/14 by default) and the "
            "segmentation model used for GAAS.")


def generators_markdown(section: str, stats: Mapping[str, Any]) -> str:
    """The generated images' terms, for the generators the build holds only (empty without a ``generations``
    config): the template's rows of those models, and a row naming the weights of any other model."""
    models = list(stats.get("models") or [])
    if not stats.get("n_generated") or not models:
        return ""
    lines = section.strip("\n").splitlines()
    kept, seen = [], set()
    for line in lines:
        key = line.split("|")[1].strip().strip("`") if line.startswith("| `") else None
        if key is None:
            kept.append(line)
        elif key in models:
            kept.append(line)
            seen.add(key)
    table_end = max(i for i, line in enumerate(kept) if line.startswith("|")) + 1 if any(
        line.startswith("|") for line in kept) else len(kept)
    weights = stats.get("model_weights") or {}
    extra = [f"| `{m}` | {', '.join(weights.get(m) or ['not recorded'])} | see the model's card |"
             for m in models if m not in seen]
    return "\n".join(kept[:table_end] + extra + kept[table_end:])


def _section(body: str, name: str) -> str | None:
    start, end = _markers(name)
    if start not in body or end not in body:
        return None
    return body.split(start, 1)[1].split(end, 1)[0]


def not_release_markdown(stats: Mapping[str, Any]) -> str:
    """What replaces the release's curation steps in the card of any other benchmark."""
    return (f"This folder was built by `geofidelity-bench build-dataset` from benchmark `{stats['name']}`, not from "
            "the published release: the release's curation steps (OpenStreetMap blocks, Mapillary images, their "
            "filters and thresholds; docs/benchmark.md) do not describe its data. Its photographs and their "
            "licenses are listed per source under *Licenses*; its held-out split follows the rule above.")


def sources_markdown(stats: Mapping[str, Any]) -> str:
    """Images per (config, source, license), with their attribution."""
    lines = ["| config | source | license | images | attribution |", "| --- | --- | --- | --: | --- |"]
    for s in stats["sources"]:
        attributions = s["attributions"]
        if len(attributions) <= 3:
            attribution = "; ".join(attributions)
        else:
            attribution = f"per image ({len(attributions)} different), see the `attribution` column"
        lines.append(f"| `{s['config']}` | {s['source']} | {s['license']} | {_fmt(s['images'])} | "
                     f"{attribution.replace('|', '/')} |")
    return "\n".join(lines)


def fill_repo_id(card: str, repo_id: str) -> str:
    """The card with every ``REPO_ID`` placeholder of its examples replaced by ``repo_id``."""
    import re

    return re.sub(rf"\b{REPO_ID_PLACEHOLDER}\b", repo_id, card)


def render_card(
    template: str,
    stats: Mapping[str, Any],
    infos: Mapping[str, tuple[int, int]],
    *,
    release: bool = False,
    curation: Mapping[str, Any] | None = None,
) -> str:
    """Fills a card template: YAML ``configs``/``dataset_info``/``size_categories``, and the body's parts.

    Every other YAML key (license, tags, ...) and the rest of the body are kept. ``infos`` maps
    each config present to ``(rows, arrow_bytes)``. The counts, the contents paragraph, the
    coverage sentence and the sources table are written from ``stats``; the ``release`` part
    (the published release's curation steps and thresholds) is kept only when ``release`` is
    true (a build of an ``import-release`` output). ``curation`` (the ``curation_summary.json`` of a
    benchmark made by ``curate``) replaces it with that benchmark's own curation provenance, and the
    ``filters`` bias items with those of the filters that ran; any other benchmark gets a sentence
    saying that the release's steps do not describe it. The ``generators`` part keeps the terms of
    the generators whose images ``stats`` counts, and is empty without generated images.
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
    body = _fill(body, "contents", contents_markdown(stats, release=release))
    body = _fill(body, "coverage", f"This dataset spans {_cities_phrase(stats)}; it is not geographically uniform.",
                 block=False)
    body = _fill(body, "sources", sources_markdown(stats))
    if curation is not None and not release:
        from ..curation.card import curation_markdown, filters_bias_markdown

        body = _fill(body, "release", curation_markdown(curation,
                                                        same_neighborhood_kinds=stats.get("same_neighborhood_kinds")))
        body = _fill(body, "filters", filters_bias_markdown(curation))
    elif not release:
        body = _fill(body, "release", not_release_markdown(stats))
        body = _fill(body, "filters", other_filters_markdown())
    generators = _section(body, "generators")
    if generators is not None:
        body = _fill(body, "generators", generators_markdown(generators, stats))
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
        "same_neighborhood_kinds": summary["same_neighborhood_kinds"],
        "cities": sorted((c.name, c.country) for c in benchmark.cities.values()),
        "sources": image_sources(benchmark),
        "n_world": summary["n_world"],
        "n_generated": 0,
        "models": [],
        "conditions": [],
    }
    if manifest is not None and len(manifest):
        stats["n_generated"] = int(len(manifest))
        stats["models"] = sorted(manifest["model"].unique())
        stats["conditions"] = sorted(manifest["condition"].unique())
        if "weights" in manifest.columns:
            stats["model_weights"] = {str(m): sorted({str(w) for w in part["weights"].dropna()})
                                      for m, part in manifest.groupby("model")}
    return stats


def _host(url: str | None) -> str:
    from urllib.parse import urlsplit

    host = urlsplit(url).netloc if url else ""
    return host or "unknown (no source_url)"


def image_sources(benchmark: Benchmark) -> list[dict[str, Any]]:
    """Distinct images per (config, source host, license), with their attributions (sorted)."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for config, images in (("references", benchmark.references), ("world", benchmark.world)):
        for im in images:
            key = (config, _host(im.source_url), im.license or "unknown (no license)")
            g = groups.setdefault(key, {"ids": set(), "attributions": set()})
            g["ids"].add(im.image_id)
            g["attributions"].add(im.attribution or "none given")
    return [{"config": c, "source": src, "license": lic, "images": len(g["ids"]),
             "attributions": sorted(g["attributions"])} for (c, src, lic), g in sorted(groups.items())]


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
    "REPO_ID_PLACEHOLDER",
    "benchmark_stats",
    "card_with_foreign_generations",
    "config_entry",
    "counts_markdown",
    "dataset_info_yaml",
    "default_card_template",
    "default_license",
    "fill_repo_id",
    "image_sources",
    "generations_config_entry",
    "join_front_matter",
    "render_card",
    "size_category",
    "split_front_matter",
    "update_readme",
]
