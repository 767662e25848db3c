"""Publishing generated panels to a Hub dataset repo, against the loopback fake Hub."""

from __future__ import annotations

import hashlib
import io
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

try:
    from fake_hub import FakeHub, unreachable_url
except ImportError:  # tests/ imported as a package
    from tests.fake_hub import FakeHub, unreachable_url
from geofidelity_bench import load_benchmark
from geofidelity_bench.generation import GeneratorSpec
from geofidelity_bench.hub import HubPushError, push_generations, update_readme
from geofidelity_bench.generation.manifest import MANIFEST_COLUMNS, load_manifest
from geofidelity_bench.generation.runner import run_generation

TOKEN = "hf_FakeSecretToken0123456789abcdef"
REPO = "tester/geofidelity-demo"
README = """---
license: cc-by-sa-4.0
configs:
- config_name: blocks
  data_files:
  - split: train
    path: blocks/*.parquet
- config_name: references
  data_files:
  - split: train
    path: references/*.parquet
---
# GeoFidelity demo

The benchmark card body.
"""


def grey(prompt, negative_prompt, generator, **kw):
    import torch

    v = int(torch.randint(0, 255, (1,), generator=generator))
    return Image.new("RGB", (16, 16), (v, v, v))


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("hubgen")
    bench = load_benchmark("demo")
    quiet = dict(progress=False, log=lambda m: None)
    run_generation(bench, ["tiny"], ["L0", "L1"], out, images_per_block=1, **quiet)
    spec = GeneratorSpec("grey", fn=grey, dtype="fp32", steps=1, guidance=0.0)
    run_generation(bench, [spec], ["GPS_ONLY"], out, images_per_block=1, **quiet)
    return out


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


def seed_benchmark_repo(hub: FakeHub) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"block_id": ["a", "b"]}), buf)
    hub.add_files("dataset", REPO, {"README.md": README.encode(), "blocks/train-00000-of-00001.parquet": buf.getvalue()})
    return buf.getvalue()


def read_generations(files: dict[str, bytes], model: str) -> list[dict]:
    rows = []
    for path in sorted(p for p in files if p.startswith(f"generations/{model}/")):
        table = pq.read_table(io.BytesIO(files[path]))
        assert b"huggingface" in (table.schema.metadata or {})  # datasets features travel with the file
        rows += table.to_pylist()
    return rows


def test_push_writes_the_generations_config_and_retries_a_failed_commit(
    gen_dir, hub, online, tmp_path, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    blocks_bytes = seed_benchmark_repo(hub)
    hub.fail_next("POST", r"/api/datasets/.+/commit/", status=503)

    report = push_generations(gen_dir, REPO, endpoint=hub.url, retry_base_delay=0.01, max_shard_rows=5)

    assert [m.model for m in report.models] == ["grey", "tiny"]
    assert hub.count("POST", r"/commit/", status=503) == 1
    assert hub.count("POST", r"/commit/", status=200) == 2
    files = hub.files("dataset", REPO)
    assert files["blocks/train-00000-of-00001.parquet"] == blocks_bytes
    assert sorted(p for p in files if p.startswith("generations/tiny/")) == [
        "generations/tiny/train-00000-of-00002.parquet",
        "generations/tiny/train-00001-of-00002.parquet",
    ]
    meta = yaml.safe_load(files["README.md"].decode().split("---")[1])
    assert meta["license"] == "cc-by-sa-4.0"
    assert [c["config_name"] for c in meta["configs"]] == ["blocks", "references", "generations"]
    assert meta["configs"][-1]["data_files"] == [{"split": "train", "path": "generations/*/*.parquet"}]
    assert "The benchmark card body." in files["README.md"].decode()

    manifest = load_manifest(gen_dir)
    for model in ("tiny", "grey"):
        rows = read_generations(files, model)
        expected = manifest[manifest["model"] == model]
        assert len(rows) == len(expected) == (8 if model == "tiny" else 7)
        for row in rows:
            assert set(MANIFEST_COLUMNS) <= set(row)
            data = row["image"]["bytes"]
            assert hashlib.sha256(data).hexdigest() == row["sha256"]
            assert row["image"]["path"] == row["path"] == f"{model}/{row['condition']}/{row['block_id']}/{row['k']:02d}.jpg"
            with Image.open(io.BytesIO(data)) as img:
                assert img.size == (512, 512)
            assert data == (gen_dir / row["path"]).read_bytes()

    # The repo as the Hub stores it loads with plain `datasets`, images decoded.
    snapshot = tmp_path / "snapshot"
    for path, data in files.items():
        (snapshot / path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / path).write_bytes(data)
    import datasets

    ds = datasets.load_dataset(str(snapshot), "generations", split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 15 and ds[0]["image"].size == (512, 512)
    assert set(ds.column_names) == {"image", *MANIFEST_COLUMNS}

    captured = capsys.readouterr()
    assert "transient error (HTTP 503" in captured.out
    for text in (captured.out, captured.err, caplog.text, repr(hub.requests)):
        assert TOKEN not in text
    assert hub.authorized_writes == 2  # the two commits (the repo existed), both authorized


def test_models_are_appended_without_clobbering_and_pushes_resume(gen_dir, hub, online):
    seed_benchmark_repo(hub)
    push_generations(gen_dir, REPO, models=["tiny"], endpoint=hub.url, log=lambda m: None)
    tiny_files = {p: d for p, d in hub.files("dataset", REPO).items() if p.startswith("generations/tiny/")}
    push_generations(gen_dir, REPO, models=["grey"], endpoint=hub.url, log=lambda m: None)
    files = hub.files("dataset", REPO)
    assert {p: d for p, d in files.items() if p.startswith("generations/tiny/")} == tiny_files
    assert any(p.startswith("generations/grey/") for p in files)
    assert files["README.md"].decode().count("config_name: generations") == 1

    # Nothing changed: a second push makes no commit (an interrupted push resumes this way).
    commits = hub.commit_count("dataset", REPO)
    messages: list[str] = []
    report = push_generations(gen_dir, REPO, endpoint=hub.url, log=messages.append)
    assert hub.commit_count("dataset", REPO) == commits
    assert all(m.up_to_date for m in report.models) and sum("up to date" in m for m in messages) == 2

    # New sharding: the model's stale shards are removed, the other model is untouched.
    push_generations(gen_dir, REPO, models=["tiny"], endpoint=hub.url, max_shard_rows=3, log=lambda m: None)
    after = hub.files("dataset", REPO)
    assert sorted(p for p in after if p.startswith("generations/tiny/")) == [
        f"generations/tiny/train-{i:05d}-of-00003.parquet" for i in range(3)
    ]
    assert {p: d for p, d in after.items() if p.startswith("generations/grey/")} == {
        p: d for p, d in files.items() if p.startswith("generations/grey/")
    }
    assert len(read_generations(after, "tiny")) == 8


def test_cli_push_uses_the_standard_token_and_never_prints_it(gen_dir, hub, online, capsys, monkeypatch):
    from geofidelity_bench.cli import main

    assert main(["push-generations", str(gen_dir), "--repo-id", REPO, "--endpoint", hub.url, "--models", "grey"]) == 0
    out = capsys.readouterr()
    assert "pushed grey" in out.out
    assert TOKEN not in out.out + out.err
    assert any(p.startswith("generations/grey/") for p in hub.files("dataset", REPO))

    wrong = "hf_WrongToken9876543210zyxwvu"
    monkeypatch.setenv("HF_TOKEN", wrong)
    assert main(["push-generations", str(gen_dir), "--repo-id", REPO, "--endpoint", hub.url]) == 2
    out = capsys.readouterr()
    assert "error" in out.err and wrong not in out.out + out.err and TOKEN not in out.out + out.err


def test_generate_with_push_to_hub(hub, online, tmp_path, capsys):
    from geofidelity_bench.cli import main

    rc = main(
        ["generate", "--model", "tiny", "--conditions", "L0", "--blocks", "lund_seg1", "--images-per-block", "2",
         "--out", str(tmp_path), "--no-progress", "--push-to-hub", REPO, "--endpoint", hub.url]
    )
    assert rc == 0
    files = hub.files("dataset", REPO)
    rows = read_generations(files, "tiny")
    assert [(r["block_id"], r["k"]) for r in rows] == [("lund_seg1", 0), ("lund_seg1", 1)]
    assert yaml.safe_load(files["README.md"].decode().split("---")[1])["configs"][0]["config_name"] == "generations"
    assert TOKEN not in capsys.readouterr().out


def test_push_refuses_clearly(gen_dir, hub, online, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    with pytest.raises(HubPushError, match="no generated image"):
        push_generations(tmp_path, REPO, endpoint=hub.url)
    with pytest.raises(HubPushError, match="no images of model"):
        push_generations(gen_dir, REPO, models=["sdxl"], endpoint=hub.url)
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(HubPushError, match="no Hugging Face token"):
        push_generations(gen_dir, REPO, endpoint=hub.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match="HF_HUB_OFFLINE"):
        push_generations(gen_dir, REPO, endpoint=hub.url, token=TOKEN)


@pytest.mark.parametrize("command", ["push-generations", "generate"])
def test_an_unreachable_hub_ends_with_one_line_naming_it(command, gen_dir, online, tmp_path, capsys):
    dead = unreachable_url()
    hub_args = ["--endpoint", dead, "--retries", "2", "--retry-wait", "0"]
    if command == "push-generations":
        argv = ["push-generations", str(gen_dir), "--repo-id", REPO, *hub_args]
    else:
        argv = ["generate", "--model", "tiny", "--conditions", "L0", "--blocks", "lund_seg1", "--images-per-block", "1",
                "--out", str(tmp_path), "--no-progress", "--push-to-hub", REPO, *hub_args]
    from geofidelity_bench.cli import main

    assert main(argv) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"geofidelity-bench {command}: error: "), out.err
    assert dead in err[0] and "ConnectError" in err[0] and "gave up after 3 attempt(s)" in err[0]
    assert "nothing was uploaded" in err[0] and "re-run the same command to resume" in err[0]
    assert out.out.count("retry 1/2") == 1 and out.out.count("retry 2/2") == 1  # --retries 2 was followed
    assert TOKEN not in out.out + out.err


def test_a_hub_lost_midway_names_what_is_already_uploaded(gen_dir, hub, online):
    def log(message: str) -> None:  # the Hub fails for good once the first model is pushed
        if "pushed grey" in message:
            hub.fail_next("POST", r"/api/datasets/.+/commit/", status=503, count=100)

    with pytest.raises(HubPushError) as excinfo:
        push_generations(gen_dir, REPO, endpoint=hub.url, attempts=2, retry_base_delay=0.0, log=log)
    message = str(excinfo.value)
    assert "\n" not in message and hub.url in message and "HTTP 503" in message
    assert "already on tester/geofidelity-demo at " + hub.url + ": generations/grey (2 file(s) uploaded)" in message
    assert "re-run the same command to resume" in message
    assert sorted({p.split("/")[1] for p in hub.files("dataset", REPO) if p.startswith("generations/")}) == ["grey"]


def test_update_readme_keeps_other_configs():
    text = update_readme(None, ["blocks/train-0.parquet", "references/x.parquet", "generations/a/b.parquet"])
    meta = yaml.safe_load(text.split("---")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["blocks", "references", "generations"]
    again = update_readme(text, [])
    assert again == text
    custom = "---\nconfigs:\n- config_name: generations\n  data_files: old/*.parquet\n- config_name: world\n  data_files: w/*\n---\nbody\n"
    meta = yaml.safe_load(update_readme(custom).split("---")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["world", "generations"]
    assert meta["configs"][1]["data_files"][0]["path"] == "generations/*/*.parquet"


def test_fake_hub_rejects_missing_token(hub, online):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(HfHubHTTPError):
        api.create_repo("tester/x", repo_type="dataset")


def test_fake_hub_serves_listing_and_downloads(hub, online, tmp_path):
    from huggingface_hub import HfApi

    blocks = seed_benchmark_repo(hub)
    api = HfApi(endpoint=hub.url, token=TOKEN)
    assert set(api.list_repo_files(REPO, repo_type="dataset")) == {
        ".gitattributes", "README.md", "blocks/train-00000-of-00001.parquet"
    }
    tree = list(api.list_repo_tree(REPO, path_in_repo="blocks", repo_type="dataset"))
    assert [t.path for t in tree] == ["blocks/train-00000-of-00001.parquet"]
    assert api.file_exists(REPO, "README.md", repo_type="dataset")
    assert not api.file_exists(REPO, "nope.txt", repo_type="dataset")
    path = api.hf_hub_download(REPO, "blocks/train-00000-of-00001.parquet", repo_type="dataset", cache_dir=str(tmp_path))
    assert open(path, "rb").read() == blocks


def test_a_concurrent_change_makes_the_push_read_the_repo_again(gen_dir, hub, online, capsys):
    seed_benchmark_repo(hub)
    hub.fail_next("POST", r"/api/datasets/.+/commit/", status=409)
    report = push_generations(gen_dir, REPO, endpoint=hub.url, retry_base_delay=0.01, max_shard_rows=5)
    assert [m.model for m in report.models] == ["grey", "tiny"]
    assert hub.count("POST", r"/commit/", status=409) == 1
    assert hub.count("POST", r"/commit/", status=200) == 2
    assert "changed while pushing" in capsys.readouterr().out
    hub.fail_next("POST", r"/api/datasets/.+/commit/", status=412, count=10)
    with pytest.raises(HubPushError, match="kept changing"):
        push_generations(gen_dir, REPO, endpoint=hub.url, retry_base_delay=0.01, max_shard_rows=2, attempts=2)


# -- a folder without manifest.parquet (any folder in the layout `evaluate` reads) ------------------


@pytest.fixture
def handmade_dir(tmp_path):
    """Panels written by hand with PIL, no manifest: two panels of PNGs, two of JPEGs (.jpg and .jpeg)."""
    root = tmp_path / "handmade"
    files = {
        "painter/L0/lund_seg1/00.png": ("PNG", (200, 10, 10)),
        "painter/L0/lund_seg1/01.png": ("PNG", (10, 200, 10)),
        "painter/L1/lund_seg1/00.png": ("PNG", (10, 10, 200)),
        "painter/L1/lund_seg1/03.png": ("PNG", (90, 90, 90)),
        "painter/L0/lund_seg2/00.jpg": ("JPEG", (120, 30, 60)),
        "painter/L0/lund_seg2/01.jpeg": ("JPEG", (30, 120, 60)),
        "sketcher/GPS_ONLY/berlin_am_lustgarten/00.jpg": ("JPEG", (60, 30, 120)),
        "sketcher/GPS_ONLY/berlin_am_lustgarten/01.JPG": ("JPEG", (1, 2, 3)),
    }
    for rel, (fmt, color) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (24, 16), color).save(root / rel, format=fmt)
    (root / "NOTES.txt").write_text("top-level files are not panels")  # skipped, as evaluate skips them
    return root


def test_a_folder_without_manifest_is_pushed_with_each_files_own_bytes_and_sha256(handmade_dir, hub, online, tmp_path):
    from geofidelity_bench.evaluation import read_generated_folder
    from geofidelity_bench.hub.configs import folder_manifest

    # The folder is one `evaluate --generated` reads: the same files are pushed.
    panels = read_generated_folder(handmade_dir, load_benchmark("demo"))
    scored = sorted(f.relative_to(handmade_dir).as_posix() for files in panels.values() for f in files)
    local = {rel: (handmade_dir / rel).read_bytes() for rel in scored}
    assert len(local) == 8

    seed_benchmark_repo(hub)
    report = push_generations(handmade_dir, REPO, endpoint=hub.url, log=lambda m: None, max_shard_rows=4)
    assert [(m.model, m.rows) for m in report.models] == [("painter", 6), ("sketcher", 2)]
    files = hub.files("dataset", REPO)
    assert sorted(p for p in files if p.startswith("generations/painter/")) == [
        "generations/painter/train-00000-of-00002.parquet", "generations/painter/train-00001-of-00002.parquet"]
    rows = read_generations(files, "painter") + read_generations(files, "sketcher")
    assert sorted(r["path"] for r in rows) == scored
    for row in rows:
        data = row["image"]["bytes"]
        assert data == local[row["path"]]  # the file's own bytes: a .png stays a .png
        assert row["image"]["path"] == row["path"]
        assert hashlib.sha256(data).hexdigest() == row["sha256"] == hashlib.sha256(local[row["path"]]).hexdigest()
        assert row["file_size"] == len(data)
        assert row["k"] == int(row["path"].rsplit("/", 1)[1].split(".")[0])
        assert row["seed"] is None and row["prompt"] is None and row["created_at"] is None
        with Image.open(io.BytesIO(data)) as img:
            assert img.format == ("PNG" if row["path"].endswith(".png") else "JPEG")
    # Rows in the order of the built files; folder_manifest gives the same rows.
    painter = [(r["condition"], r["block_id"], r["k"]) for r in read_generations(files, "painter")]
    assert painter == sorted(painter)
    assert [r["sha256"] for r in folder_manifest(handmade_dir)] == [r["sha256"] for r in rows]

    # The repo loads with plain `datasets`, PNG and JPEG rows side by side.
    snapshot = tmp_path / "snapshot"
    for path, data in files.items():
        (snapshot / path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / path).write_bytes(data)
    import datasets

    ds = datasets.load_dataset(str(snapshot), "generations", split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 8 and {ds[i]["image"].format for i in range(len(ds))} == {"PNG", "JPEG"}

    # Pushing the unchanged folder again makes no commit.
    commits = hub.commit_count("dataset", REPO)
    again = push_generations(handmade_dir, REPO, endpoint=hub.url, log=lambda m: None, max_shard_rows=4)
    assert all(m.up_to_date for m in again.models) and hub.commit_count("dataset", REPO) == commits


def test_cli_pushes_a_folder_without_manifest(handmade_dir, hub, online, capsys):
    from geofidelity_bench.cli import main

    assert main(["push-generations", str(handmade_dir), "--repo-id", REPO, "--endpoint", hub.url]) == 0
    assert "pushed painter" in capsys.readouterr().out
    rows = read_generations(hub.files("dataset", REPO), "sketcher")
    assert [r["path"] for r in rows] == ["sketcher/GPS_ONLY/berlin_am_lustgarten/00.jpg",
                                         "sketcher/GPS_ONLY/berlin_am_lustgarten/01.JPG"]


def test_a_folder_without_manifest_is_refused_by_file(handmade_dir, hub, online, tmp_path):
    from geofidelity_bench.hub.configs import DatasetBuildError

    # A panel that is a link to a file outside the folder is never read, and named.
    secret = tmp_path / "secret.png"
    Image.new("RGB", (4, 4)).save(secret)
    link = handmade_dir / "painter" / "L0" / "lund_seg1" / "02.png"
    link.symlink_to(secret)
    (handmade_dir / "painter" / "L0" / "lund_seg1" / "notes.txt").write_text("x")
    (handmade_dir / "painter" / "L0" / "lund_seg2" / "00.webp").write_bytes(b"RIFF")  # index 0 twice
    with pytest.raises(DatasetBuildError) as excinfo:
        push_generations(handmade_dir, REPO, endpoint=hub.url, log=lambda m: None)
    message = str(excinfo.value)
    assert f"{link}: a link that leads outside the folder" in message
    assert "notes.txt: not a panel image" in message
    assert "00.jpg and 00.webp have the same index 0" in message
    assert "3 problem(s)" in message and hub.count("POST", r"/commit/") == 0

    # Neither a manifest nor panel files: one clear error.
    empty = tmp_path / "empty"
    (empty / "painter" / "L0").mkdir(parents=True)
    with pytest.raises(HubPushError, match=r"no generated image to push: neither a generation manifest.parquet nor "
                                            r"panel files"):
        push_generations(empty, REPO, endpoint=hub.url)
