"""The Hub dataset: build-dataset, the GeneratorBasedBuilder, push-dataset (loopback fake Hub), reading back."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

try:
    from fake_hub import FakeHub, unreachable_url
except ImportError:  # tests/ imported as a package
    from tests.fake_hub import FakeHub, unreachable_url
from geofidelity_bench import load_benchmark
from geofidelity_bench.benchmark import demo_path
from geofidelity_bench.cli import main
from geofidelity_bench.generation.manifest import (
    MANIFEST_COLUMNS,
    atomic_write_bytes,
    encode_panel,
    panel_relpath,
    write_manifest,
)
from geofidelity_bench.hub import (
    DATASET_CONFIGS,
    HubPushError,
    benchmark_rows,
    config_features,
    export_generations,
    fetch_dataset,
    push_dataset,
)

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_FakeDatasetToken0123456789abcdef"
REPO = "tester/geofidelity-bench"
MODELS = ("grey", "tint")
CONDITIONS = ("L0", "GPS_ONLY")


def load_dataset_builder_module(name: str):
    spec = importlib.util.spec_from_file_location(f"geofidelity_dataset_builder_{name}", ROOT / "dataset_builder" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def load_builder_class():
    return load_dataset_builder_module("builder").GeoFidelityBench


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory, demo):
    """A generation folder for the demo, written directly (no model run): 2 models x 2 conditions x 2 images."""
    out = tmp_path_factory.mktemp("generated")
    rows = []
    for m, model in enumerate(MODELS):
        for c, condition in enumerate(CONDITIONS):
            for b, block_id in enumerate(demo.block_ids):
                for k in range(2):
                    v = (40 * m + 25 * c + 9 * b + 3 * k) % 256
                    data = encode_panel(Image.new("RGB", (16, 16), (v, 255 - v, (v * 7) % 256)))
                    rel = panel_relpath(model, condition, block_id, k)
                    atomic_write_bytes(out / rel, data)
                    rows.append(dict(model=model, block_id=block_id, condition=condition, k=k, seed=1000 + k,
                                     prompt=f"a street in {block_id}", path=rel, sha256=hashlib.sha256(data).hexdigest(),
                                     file_size=len(data), benchmark=demo.name, benchmark_fingerprint=demo.fingerprint))
    write_manifest(out, rows)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory, gen_dir):
    out = tmp_path_factory.mktemp("hub_folder")
    assert main(["build-dataset", "demo", "--out", str(out), "--generations", str(gen_dir), "--max-shard-rows", "30"]) == 0
    return out


def _load(folder, config, cache):
    import datasets

    return datasets.load_dataset(str(folder), config, split="train", cache_dir=str(cache))


def _undecoded(ds):
    from datasets import Image as ImageFeature

    return ds.cast_column("image", ImageFeature(decode=False)) if "image" in ds.column_names else ds


def _key(config, row):
    return {
        "blocks": lambda r: r["block_id"],
        "references": lambda r: r["reference_id"],
        "cities": lambda r: r["key"],
        "world": lambda r: r["image_id"],
        "generations": lambda r: (r["model"], r["condition"], r["block_id"], r["k"]),
    }[config](row)


def test_built_folder_loads_with_datasets_and_matches_the_demo(built, demo, gen_dir, tmp_path):
    cache = tmp_path / "cache"
    for config in ("blocks", "references", "cities", "world"):
        ds = _load(built, config, cache)
        expected = sorted(benchmark_rows(demo, config), key=lambda r: _key(config, r))
        rows = sorted(_undecoded(ds).to_list(), key=lambda r: _key(config, r))
        assert ds.features == config_features(config)
        assert len(rows) == len(expected) == {"blocks": 7, "references": 41, "cities": len(demo.cities), "world": 71}[config]
        assert rows == expected, config
        if "image" in ds.column_names:
            image = ds[0]["image"]
            image.load()
            assert image.size[0] > 0 and image.mode in ("RGB", "L")

    gens = _load(built, "generations", cache)
    assert len(gens) == len(MODELS) * len(CONDITIONS) * len(demo.block_ids) * 2
    assert set(gens.column_names) == {"image", *MANIFEST_COLUMNS}
    assert gens[0]["image"].size == (512, 512)
    for row in _undecoded(gens).to_list():
        assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == row["sha256"]
        assert row["image"]["bytes"] == (gen_dir / row["path"]).read_bytes()

    # geofidelity_bench reads the same folder.
    again = load_benchmark(built)
    assert again.fingerprint == demo.fingerprint and len(again.world) == 71
    assert again.negatives(demo.block_ids[0]) == demo.negatives(demo.block_ids[0])

    # Image configs are sharded (30 rows) in row groups of at most 100; features travel in the schema.
    shards = sorted((built / "references").glob("*.parquet"))
    assert [p.name for p in shards] == [f"train-0000{i}-of-00002.parquet" for i in range(2)]
    meta = pq.ParquetFile(shards[0]).metadata
    assert all(meta.row_group(i).num_rows <= 100 for i in range(meta.num_row_groups))
    assert b"huggingface" in pq.read_schema(shards[0]).metadata

    # The card: configs, dataset_info with the real counts, licenses, filled-in counts table.
    text = (built / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---")[1])
    assert [c["config_name"] for c in meta["configs"]] == list(DATASET_CONFIGS)
    assert meta["configs"][-1]["data_files"] == [{"split": "train", "path": "generations/*/*.parquet"}]
    sizes = {i["config_name"]: i["splits"][0]["num_examples"] for i in meta["dataset_info"]}
    assert sizes == {"blocks": 7, "references": 41, "cities": len(demo.cities), "world": 71, "generations": len(gens)}
    assert meta["license"] == "other" and meta["license_link"] == "LICENSE.md"
    assert "| street blocks | 7 |" in text and "| reference assignments (`references` rows) | 41 |" in text
    assert demo.fingerprint in text and "arXiv:2606.23669" in text and "Tan, Kaizhen" in text
    assert "ODbL 1.0" in (built / "LICENSE.md").read_text(encoding="utf-8")


def test_generator_based_builder_yields_the_same_rows(built, gen_dir, tmp_path):
    builder_cls = load_builder_class()
    assert [c.name for c in builder_cls.BUILDER_CONFIGS] == list(DATASET_CONFIGS)
    for config in DATASET_CONFIGS:
        builder = builder_cls(config_name=config, data_dir=str(demo_path()), generations_dir=str(gen_dir),
                              cache_dir=str(tmp_path / "builder-cache"))
        builder.download_and_prepare()
        ds = builder.as_dataset(split="train")
        assert ds.features == config_features(config)
        direct = sorted(_undecoded(ds).to_list(), key=lambda r: _key(config, r))
        loaded = sorted(_undecoded(_load(built, config, tmp_path / "cache")).to_list(), key=lambda r: _key(config, r))
        assert direct == loaded, config


def test_demo_card_describes_the_demo_not_the_release(built, demo):
    card = (built / "README.md").read_text(encoding="utf-8")
    body = card.split("\n---\n", 1)[1]
    for city in demo.cities.values():
        assert f"{city.name} ({city.country})" in body
    assert f"{len(demo.cities)} cities in {len({c.country for c in demo.cities.values()})} countries" in body
    # Licenses and sources per source, counted from the references (distinct images) and the world pool.
    for config, images in (("references", demo.references), ("world", demo.world)):
        for license_ in {im.license for im in images}:
            hosts = {im.source_url.split("/")[2] for im in images if im.license == license_}
            for host in hosts:
                n = len({im.image_id for im in images if im.license == license_ and im.source_url.split("/")[2] == host})
                assert f"| `{config}` | {host} | {license_} | {n} |" in body, (config, host, license_)
    assert "BSD-2-Clause" in body and "CC-BY-SA-4.0" in body
    # The published release's numbers and curation thresholds are not claimed for the demo.
    for claim in ("fewer than 25 images", "23 countries", "six continents", "top 100 images per block",
                  "Counts of the published release"):
        assert claim not in body, claim
    assert "not from the published release" in body


def test_card_of_the_release_keeps_its_curation_steps(demo):
    from geofidelity_bench.hub.card import benchmark_stats, default_card_template, render_card

    template = default_card_template().read_text(encoding="utf-8")
    stats = benchmark_stats(demo)
    release = render_card(template, stats, {"blocks": (7, 1), "references": (41, 1)}, release=True)
    other = render_card(template, stats, {"blocks": (7, 1), "references": (41, 1)})
    assert "blocks with fewer than 25 images are dropped" in release and "not from the published release" not in release
    assert "blocks with fewer than 25 images are dropped" not in other


def test_build_refuses_unclear_situations(built, tmp_path, capsys, gen_dir):
    assert main(["build-dataset", "demo", "--out", str(built)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    bogus = tmp_path / "gen"
    bogus.mkdir()
    assert main(["build-dataset", "demo", "--out", str(tmp_path / "x"), "--generations", str(bogus)]) == 2
    assert "no generated image" in capsys.readouterr().err


def test_committed_card_declares_the_features_of_the_code():
    from datasets import Features

    from geofidelity_bench.hub.card import default_card_template, default_license

    meta = yaml.safe_load(default_card_template().read_text(encoding="utf-8").split("---")[1])
    assert meta["license"] == "other" and meta["license_link"] == "LICENSE.md"
    assert default_license().is_file()
    declared = {c["config_name"] for c in meta["configs"]}
    assert declared == {"blocks", "references", "cities", "generations"}  # the published release has no world pool
    for info in meta["dataset_info"]:
        assert Features._from_yaml_list(info["features"]) == config_features(info["config_name"]), info["config_name"]


def test_build_script_uses_the_card_beside_it(tmp_path, capsys):
    build = load_dataset_builder_module("build")
    assert build.main(["demo", "--out", str(tmp_path / "demo_dataset")]) == 0
    text = (tmp_path / "demo_dataset" / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["blocks", "references", "cities", "world"]
    assert "## Biases and limitations" in text and "| street blocks | 7 |" in text
    assert "wrote 6 file(s) to" in capsys.readouterr().out


@pytest.fixture
def online(monkeypatch):
    """The suite runs with HF_HUB_OFFLINE=1; the fake Hub is on loopback, so allow requests."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)


@pytest.fixture
def hub():
    with FakeHub(token=TOKEN) as server:
        yield server


def _local_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _write_snapshot(files: dict[str, bytes], folder: Path) -> Path:
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


def test_push_stores_the_folder_retries_and_resumes(built, demo, hub, online, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    hub.fail_next("POST", r"/api/datasets/.+/commit/", status=500)
    report = push_dataset(built, REPO, endpoint=hub.url, retry_base_delay=0.01)

    assert hub.count("POST", r"/commit/", status=500) == 1
    assert [g.name for g in report.groups] == ["blocks", "references", "cities", "world", "generations/grey",
                                               "generations/tint", "card"]
    files = hub.files("dataset", REPO)
    local = _local_files(built)
    assert b"REPO_ID" in local["README.md"]
    # The card's examples name the repo they were pushed to; every other file is stored as built.
    card = files["README.md"].decode()
    assert "REPO_ID" not in card and f'load_dataset("{REPO}", "blocks"' in card
    assert card == local["README.md"].decode().replace("REPO_ID", REPO)
    local["README.md"] = files["README.md"]
    assert {p: files[p] for p in local} == local and set(files) == {*local, ".gitattributes"}
    assert sorted(report.uploaded) == sorted(local)

    # What the Hub stores loads with datasets and with load_benchmark.
    snapshot = _write_snapshot(files, tmp_path / "snapshot")
    assert len(_load(snapshot, "references", tmp_path / "cache")) == 41
    assert load_benchmark(snapshot).fingerprint == demo.fingerprint

    # A second push uploads nothing and makes no commit (an interrupted push resumes this way).
    commits, posts = hub.commit_count("dataset", REPO), hub.count("POST", r"/(commit|preupload)/")
    again = push_dataset(built, REPO, endpoint=hub.url)
    assert again.uploaded == [] and again.commits == []
    assert hub.commit_count("dataset", REPO) == commits and hub.count("POST", r"/(commit|preupload)/") == posts

    # Read back through the Hub API: a benchmark folder, and panels evaluation accepts.
    fetched = fetch_dataset(REPO, tmp_path / "fetched", endpoint=hub.url, token=TOKEN)
    bench = load_benchmark(fetched)
    assert bench.fingerprint == demo.fingerprint
    from geofidelity_bench.evaluation import read_generated_folder

    assert export_generations(fetched, tmp_path / "panels") == len(MODELS) * len(CONDITIONS) * 7 * 2
    panels = read_generated_folder(tmp_path / "panels", bench)
    assert len(panels) == len(MODELS) * len(CONDITIONS) * 7

    out = capsys.readouterr()
    assert "transient error (HTTP 500" in out.out
    for text in (out.out, out.err, caplog.text, repr(hub.requests)):
        assert TOKEN not in text


def test_push_replaces_stale_shards_and_keeps_other_generations(built, demo, hub, online, tmp_path, gen_dir, capsys):
    # The repo already holds generations of a model this build does not have (e.g. from push-generations).
    other = io.BytesIO()
    pq.write_table(pq.read_table(next((built / "generations" / "grey").glob("*.parquet"))).slice(0, 2), other)
    hub.add_files("dataset", REPO, {"generations/other/train-00000-of-00001.parquet": other.getvalue()})

    assert main(["push-dataset", str(built), "--repo-id", REPO, "--endpoint", hub.url]) == 0
    out = capsys.readouterr()
    assert "uploaded" in out.out and TOKEN not in out.out + out.err
    files = hub.files("dataset", REPO)
    assert files["generations/other/train-00000-of-00001.parquet"] == other.getvalue()
    meta = yaml.safe_load(files["README.md"].decode().split("---")[1])
    assert [c["config_name"] for c in meta["configs"]].count("generations") == 1
    assert "generations" not in {i["config_name"] for i in meta["dataset_info"]}  # its size is unknown here
    snapshot = _write_snapshot(files, tmp_path / "snap1")
    assert len(_load(snapshot, "generations", tmp_path / "cache")) == len(MODELS) * len(CONDITIONS) * 7 * 2 + 2

    # Rebuilt with other shard sizes: the old reference shards are deleted in the same commit.
    rebuilt = tmp_path / "rebuilt"
    assert main(["build-dataset", "demo", "--out", str(rebuilt), "--generations", str(gen_dir),
                 "--max-shard-rows", "20"]) == 0
    report = push_dataset(rebuilt, REPO, endpoint=hub.url, log=lambda m: None)
    files = hub.files("dataset", REPO)
    assert sorted(p for p in files if p.startswith("references/")) == [
        f"references/train-0000{i}-of-00003.parquet" for i in range(3)
    ]
    refs = next(g for g in report.groups if g.name == "references")
    assert refs.deleted == [f"references/train-0000{i}-of-00002.parquet" for i in range(2)]
    snapshot = _write_snapshot(files, tmp_path / "snap2")
    assert load_benchmark(snapshot).fingerprint == demo.fingerprint


def test_push_to_an_unreachable_hub_ends_with_one_line(built, online, capsys):
    dead = unreachable_url()
    assert main(["push-dataset", str(built), "--repo-id", REPO, "--endpoint", dead, "--retries", "1",
                 "--retry-wait", "0"]) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("geofidelity-bench push-dataset: error: look up " + REPO), out.err
    assert dead in err[0] and "ConnectError" in err[0] and "gave up after 2 attempt(s)" in err[0]
    assert "nothing was uploaded" in err[0] and "re-run the same command to resume" in err[0]
    assert "retry 1/1" in out.out and TOKEN not in out.out + out.err


def test_push_that_fails_after_some_configs_names_them(built, hub, online):
    def log(message: str) -> None:  # the Hub stops accepting commits once the first two configs are in
        if "pushed references" in message:
            hub.fail_next("POST", r"/api/datasets/.+/commit/", status=502, count=2)  # both attempts

    with pytest.raises(HubPushError) as excinfo:
        push_dataset(built, REPO, endpoint=hub.url, attempts=2, retry_base_delay=0.0, log=log)
    message = str(excinfo.value)
    assert message.startswith(f"commit cities to {REPO}: HTTP 502") and "\n" not in message
    assert f"already on {REPO} at {hub.url}: blocks (1 file(s) uploaded), references (2 file(s) uploaded)" in message
    # resuming skips what is done: the blocks and references go up unchanged, nothing is committed twice
    report = push_dataset(built, REPO, endpoint=hub.url, retry_base_delay=0.0, log=lambda m: None)
    assert [g.up_to_date for g in report.groups[:2]] == [True, True] and not report.groups[2].up_to_date


def test_push_refuses_clearly(hub, online, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    assert main(["push-dataset", str(tmp_path), "--repo-id", REPO, "--endpoint", hub.url]) == 2
    assert "build-dataset" in capsys.readouterr().err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "blocks").mkdir()
    with pytest.raises(Exception, match="not a built dataset folder"):
        push_dataset(tmp_path, REPO, endpoint=hub.url)
