"""Credentials inside a URL (``--endpoint http://user:password@host``) are never printed nor written
(issue 29, leaks): :func:`geofidelity_bench.errors.redact_url` on every message, log line and file."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from geofidelity_bench.cli import main
from geofidelity_bench.errors import redact_url

try:
    from fake_hub import FakeHub, unreachable_url
except ImportError:  # pragma: no cover - run from the repository root
    from tests.fake_hub import FakeHub, unreachable_url

PASSWORD = "pw-S3CRET-7731"
TOKEN = "hf_redaction_test_token"


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@", 1)


@pytest.mark.parametrize("text, want", [
    ("http://alice:s3cret@hub.local:8080/api", "http://***@hub.local:8080/api"),
    ("GET https://u:p@ss:w@h.example/a?b=c@d failed", "GET https://***@h.example/a?b=c@d failed"),  # '@' in the password
    ("'http://a:b@c' and HTTP://D:E@F/x", "'http://***@c' and HTTP://***@F/x"),
    ("http://only-user@host/x", "http://***@host/x"),
    ("http://host/x@y and mailto:a@b.c and user@example.org", "http://host/x@y and mailto:a@b.c and user@example.org"),
])
def test_redact_url(text, want):
    assert redact_url(text) == want


@pytest.fixture
def online(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from conftest import make_block, make_refs
    from geofidelity_bench.benchmark import Benchmark, save_benchmark

    blocks = [make_block("a1", neg_random_city="b1"), make_block("b1", city="berlin", country="DE", neg_random_city="a1")]
    folder = save_benchmark(Benchmark(blocks, make_refs("a1", 3, 1) + make_refs("b1", 3, 2), name="t"),
                            tmp_path_factory.mktemp("bench") / "bench")
    out = tmp_path_factory.mktemp("built") / "ds"
    assert main(["build-dataset", str(folder), "--out", str(out)]) == 0
    return out


def _everything_written(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_push_dataset_never_prints_the_password_of_its_endpoint(built, online, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    before = _everything_written(built)
    # a Hub that answers (it refuses the credentials) and one that is not there, with a retry in between
    with FakeHub(token=TOKEN) as hub:
        hub.fail_next("POST", r"/api/repos/create", status=503, count=1)
        assert main(["push-dataset", str(built), "--repo-id", "user/x", "--endpoint", _with_credentials(hub.url),
                     "--retries", "1", "--retry-wait", "0"]) == 2
        first = capsys.readouterr()
    assert main(["push-dataset", str(built), "--repo-id", "user/x", "--endpoint", _with_credentials(unreachable_url()),
                 "--retries", "1", "--retry-wait", "0"]) == 2
    second = capsys.readouterr()
    for out in (first, second):
        err = out.err.strip().splitlines()
        assert len(err) == 1 and "http://***@127.0.0.1:" in err[0], out.err
    printed = first.out + first.err + second.out + second.err + caplog.text
    assert "retry 1/1" in printed  # the retry line was printed ...
    assert PASSWORD not in printed and "alice" not in printed  # ... without the credentials
    assert _everything_written(built) == before


def test_hub_log_records_are_redacted_while_a_command_runs(built, online, capsys, caplog):
    """huggingface_hub logs the URLs it requests (retries); those records are redacted whatever handler
    prints them."""
    from geofidelity_bench.cli import redacted_log_records

    caplog.set_level(logging.WARNING)
    with redacted_log_records():
        logging.getLogger("huggingface_hub.utils._http").warning("'boom' thrown while requesting GET %s/api/x",
                                                                 _with_credentials("http://127.0.0.1:9"))
    logging.getLogger("x").warning("after: %s", _with_credentials("http://h"))  # the factory is restored
    assert "GET http://***@127.0.0.1:9/api/x" in caplog.text and caplog.text.count(PASSWORD) == 1


def test_the_recorded_command_line_carries_no_credentials():
    from geofidelity_bench.provenance import command_line

    args = argparse.Namespace(argv=["push-results", "r", "--repo-id", "u/r", "--endpoint", _with_credentials("http://h:1")])
    assert command_line(args) == "geofidelity-bench push-results r --repo-id u/r --endpoint http://***@h:1"


def test_overpass_error_message_carries_no_credentials():
    from geofidelity_bench.curation import CurationError
    from geofidelity_bench.curation.http import RetryPolicy
    from geofidelity_bench.curation.osm import OverpassClient

    client = OverpassClient([_with_credentials(unreachable_url()) + "/api/interpreter"],
                            retry=RetryPolicy(max_server_retries=0, sleep=lambda s: None), timeout_s=2)
    with pytest.raises(CurationError) as info:
        client.run("[out:json];node(1);out;")
    assert PASSWORD not in str(info.value) and "***@" in str(info.value)


def test_mapillary_client_names_its_base_without_credentials():
    from geofidelity_bench.curation.mapillary import MapillaryClient

    client = MapillaryClient("MLY|token-for-repr", base_url=_with_credentials("http://127.0.0.1:9"))
    assert PASSWORD not in repr(client) and "http://***@127.0.0.1:9" in repr(client)


# -- a URL given as --cache-dir (issue 43): never printed, warned or written with its password --------------

#: The secret in every shape it may take inside a URL's user-info: plain, percent-encoded once and twice.
_CACHE_DIR_SECRETS = {
    "plain": ("S3cretTok", "S3cretTok"),
    "percent-encoded once": ("S3cret%40Tok", "S3cret"),
    "percent-encoded twice": ("S3cret%2540Tok", "S3cret"),
}


def _cache_dir_url(password: str) -> str:
    return f"http://alice:{password}@cache.example/emb"


def _assert_secret_nowhere(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text and secret.lower() not in text.lower()


@pytest.mark.parametrize("password,secret", list(_CACHE_DIR_SECRETS.values()), ids=list(_CACHE_DIR_SECRETS))
def test_a_url_cache_dir_that_cannot_be_written_is_warned_about_without_its_password(
        tmp_path, monkeypatch, capfd, recwarn, password, secret):
    (tmp_path / "http:").write_bytes(b"a file where the cache folder would go")  # every write of the cache fails
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--benchmark", "demo", "--hash-only", "--no-progress", "--out", str(tmp_path / "audit"),
                 "--cache-dir", _cache_dir_url(password)]) == 0
    out, err = capfd.readouterr()
    warned = [str(w.message) for w in recwarn]
    assert any("cannot write the" in w and "***@cache.example" in w for w in warned), warned
    written = b"".join(p.read_bytes() for p in (tmp_path / "audit").iterdir()).decode()
    _assert_secret_nowhere(secret, out, err, *warned, written)


@pytest.mark.parametrize("password,secret", list(_CACHE_DIR_SECRETS.values()), ids=list(_CACHE_DIR_SECRETS))
def test_a_url_cache_dir_is_stored_in_run_json_without_its_password(
        tmp_path, monkeypatch, capfd, recwarn, warm_demo_cache, password, secret):
    import shutil

    from conftest import jpeg_bytes
    from geofidelity_bench.benchmark import load_benchmark

    monkeypatch.chdir(tmp_path)
    url = _cache_dir_url(password)
    shutil.copytree(warm_demo_cache, Path(url))  # the folder that URL names, warm (Path collapses its "//")
    panel = tmp_path / "gen" / "tiny" / "L0" / load_benchmark("demo").block_ids[0]
    panel.mkdir(parents=True)
    for k in range(2):
        (panel / f"{k:02d}.jpg").write_bytes(jpeg_bytes(300 + k, size=(96, 64)))
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(tmp_path / "gen"), "--encoder",
                 "efficientnet-lite0", "--out", str(tmp_path / "out"), "--cache-dir", url, "--no-progress",
                 "--no-gaas"]) == 0
    out, err = capfd.readouterr()
    run = (tmp_path / "out" / "run.json").read_text()
    assert "***@cache.example" in json.loads(run)["embedding_cache"]
    written = _everything_written(tmp_path / "out").decode("utf-8", "replace")
    _assert_secret_nowhere(secret, out, err, *(str(w.message) for w in recwarn), written)
