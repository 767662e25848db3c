"""A credential inside a URL never reaches the user (issue 43, leaks), as a property: secrets generated in
every shape a URL can carry them (user-info with any RFC 3986 sub-delimiter, the apostrophe included;
``access_token=``-like query parameters; plain, percent-encoded once or twice, nested in another URL's
query), run through :func:`geofidelity_bench.errors.redact_url` and through the real commands
(``push-dataset`` against the loopback fake Hub, ``app --results-repo``, ``curate`` against the fake
Mapillary), and every route checked: standard output and error, log records, warnings, files written.

A secret is made of pieces (letters and digits after a ``qZ`` mark) joined by delimiters; no encoding
changes letters and digits, so a piece found anywhere, in any case, is a leak in some encoding."""

from __future__ import annotations

import base64
import json
import logging
import re
import string
import warnings
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from geofidelity_bench.cli import main
from geofidelity_bench.errors import redact_url

try:
    from fake_hub import FakeHub, unreachable_url
except ImportError:  # pragma: no cover - run from the repository root
    from tests.fake_hub import FakeHub, unreachable_url

HF_TOKEN = "hf_property_test_token"
#: hypothesis settings of the project's property tests (reproducible, no example database)
FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None)
#: for a whole command per example: no shrinking (each step would run the command again; the failing example
#: is reported as found, its shape in the message)
SLOW = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# -- the secrets -----------------------------------------------------------------------------------

PIECE = st.text(string.ascii_letters + string.digits, min_size=4, max_size=8).map(lambda s: "qZ" + s)
#: RFC 3986 user-info characters besides letters and digits: unreserved marks, sub-delimiters (the
#: apostrophe among them), ':' and percent-encoded octets (an encoded '@', '/', '%', ':')
USERINFO_DELIMS = list("-._~!$&'()*+,;=:") + ["%40", "%2F", "%25", "%3A", "%27"]
TOKEN_DELIMS = list("|-._~+/=") + ["%7C", "%2B"]
SECRET_PARAMS = ["access_token", "token", "key", "password", "sig", "api_key", "client_secret", "X-Amz-Signature"]


@st.composite
def joined(draw, delims):
    """(pieces, secret): 1 to 3 pieces joined by delimiters, maybe one in front and one behind."""
    pieces = draw(st.lists(PIECE, min_size=1, max_size=3))
    seps = draw(st.lists(st.sampled_from(delims), min_size=len(pieces) + 1, max_size=len(pieces) + 1))
    text = seps[0] if draw(st.booleans()) else ""
    for i, piece in enumerate(pieces):
        text += piece + (seps[i + 1] if i < len(pieces) - 1 else "")
    return pieces, text + (seps[-1] if draw(st.booleans()) else "")


def encode(url: str, level: int, keep_slashes: bool) -> str:
    for _ in range(level):
        url = quote(url, safe="/" if keep_slashes else "")
    return url


#: (kind, encoding level, nested in another URL's query): every shape a secret takes in these tests
SHAPES = {
    "user-info": ("userinfo", 0, False),  # http://user:it's@host
    "user-info nested plain": ("userinfo", 0, True),  # http://h/x?next=http://user:pw@h2/
    "user-info nested encoded once": ("userinfo", 1, True),  # http://h/x?next=http%3A%2F%2Fu%3Apw%40h2%2F
    "user-info nested encoded twice": ("userinfo", 2, True),
    "user-info nested encoded 3 times": ("userinfo", 3, True),
    "query parameter": ("param", 0, False),  # http://h/x?access_token=...
    "query parameter nested plain": ("param", 0, True),
    "query parameter nested encoded once": ("param", 1, True),
    "query parameter nested encoded twice": ("param", 2, True),
}


@st.composite
def secret_urls(draw, shapes=tuple(SHAPES)):
    """(pieces, a function base URL -> the URL carrying the secret, a label), in one of ``shapes``."""
    label = draw(st.sampled_from(list(shapes)))
    kind, level, nested = SHAPES[label]
    if kind == "userinfo":
        user_pieces, user = draw(joined(USERINFO_DELIMS))
        pw_pieces, pw = draw(joined(USERINFO_DELIMS))
        if "'" not in pw:
            pw = draw(st.sampled_from(["it's", "'", "x'y"])) + pw  # the apostrophe of issue 43, always
        tail = draw(PIECE)  # and every sub-delimiter, ':' and an encoded '@' before a last piece
        pw, pw_pieces = f"{pw}!$&'()*+,;=:%40{tail}", [*pw_pieces, tail]
        pieces, credential = user_pieces + pw_pieces, f"{user}:{pw}"
        if draw(st.booleans()):
            pieces, credential = pw_pieces, pw  # a user name alone is user-info as well
        inner = f"http://{credential}@h2.example:8080/p?q=1"
    else:
        pieces, token = draw(joined(TOKEN_DELIMS))
        name = draw(st.sampled_from(SECRET_PARAMS))
        credential = token
        inner = f"http://h2.example/p?a=1&{name}={token}" + draw(st.sampled_from(["", "&b=2", "#frag"]))
    keep_slashes = draw(st.booleans())

    def build(base: str) -> str:
        if not nested:
            if kind == "userinfo":
                return base.replace("://", f"://{credential}@", 1)
            return f"{base}/x?{inner.split('?', 1)[1]}"
        return f"{base}/x?next={encode(inner, level, keep_slashes)}&y=1"

    return pieces, build, label + (" (slashes kept)" if keep_slashes and level else "")


def leaked(pieces, *texts) -> list[str]:
    """The pieces of a secret found in any of ``texts`` (bytes or str), in any case."""
    found = []
    for text in texts:
        low = (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)).lower()
        found += [p for p in pieces if p.lower() in low]
    return found


CONTEXTS = [
    "{}", "cannot reach {} (HTTP 503)", "'{}'", '"{}"', "({})", "[{}]", "<{}>", "url={}", "GET {}: refused",
    "{}\nnext line", "json: {{\"url\": \"{}\"}}",
]


# -- redact_url: every shape, in every context ---------------------------------------------------------


@FAST
@given(secret_urls(), st.sampled_from(CONTEXTS), st.sampled_from(["http://hub.example", "https://h.example:8443"]))
def test_redact_url_leaves_no_piece_of_a_secret(secret, context, base):
    pieces, build, label = secret
    url = build(base)
    text = context.format(url)
    out = redact_url(text)
    assert not leaked(pieces, out), (label, text, out)
    assert redact_url(out) == out  # redacting twice changes nothing
    assert "h2.example" in out or "hub.example" in out or "h.example" in out  # the hosts stay readable


@FAST
@given(secret_urls())
def test_redact_url_through_json_and_repr_keeps_the_container_readable(secret):
    pieces, build, _ = secret
    url = build("http://hub.example")
    dumped = json.dumps({"error": f"GET {url} failed", "n": 1})
    out = redact_url(dumped)
    assert not leaked(pieces, out) and json.loads(out)["n"] == 1  # still JSON
    assert not leaked(pieces, redact_url(repr(url)), redact_url(repr([url, url])))


SAFE_URLS = st.builds(
    lambda host, path, q: f"https://{host}.example/{path}" + (f"?{urlencode(q)}" if q else ""),
    st.text(string.ascii_lowercase, min_size=1, max_size=8),
    st.text(string.ascii_letters + string.digits + "/-_.", max_size=20),
    st.dictionaries(st.sampled_from(["bbox", "fields", "limit", "after", "revision", "q", "page"]),
                    st.text(string.ascii_letters + string.digits + ",.-", max_size=12), max_size=3),
)


@FAST
@given(SAFE_URLS, st.sampled_from(CONTEXTS))
def test_redact_url_changes_nothing_without_a_credential(url, context):
    text = context.format(url)
    assert redact_url(text) == text
    nested = f"http://hub.example/x?next={quote(url, safe='')}"
    assert redact_url(nested) == nested


@pytest.mark.parametrize("text, want", [
    ("http://user:it'sS3cret@host/x", "http://***@host/x"),
    ("http://h/x?next=http%3A%2F%2Fu%3Apw%40h2%2F", "http://h/x?next=http%3A%2F%2F***%40h2%2F"),
    ("http://h/x?next=http%253A%252F%252Fu%253Apw%2540h2%252F", "http://h/x?next=http%253A%252F%252F***%2540h2%252F"),
    ("http://h/images?after=2&next=http%253A%252F%252Fh%252Fimages%253Faccess_token%253DMLY%25257Cx%25257Cy",
     "http://h/images?after=2&next=http%253A%252F%252Fh%252Fimages%253Faccess_token%253D***"),
    ("GET http://h/?a=1&Access_Token=abc&sig=def#f", "GET http://h/?a=1&Access_Token=***&sig=***#f"),
    ("access_token=abc is not valid", "access_token=*** is not valid"),
    ("the sort key=block_id", "the sort key=block_id"),  # a short name is a credential only in a query
    ("http:/alice:pw@host/cache", "http:/***@host/cache"),  # a URL given as a folder, '//' collapsed by Path
    ("C:/Users/a@b.c", "C:/Users/a@b.c"),  # a Windows drive is not a scheme
])
def test_redact_url_examples(text, want):
    assert redact_url(text) == want


def test_curation_redact_removes_a_known_token_in_every_encoding():
    from geofidelity_bench.curation.http import redact

    token = "MLY|123|qZsecret"
    texts = [token, quote(token, safe=""), quote(quote(token, safe=""), safe=""), quote(quote(token)).lower()]
    out = redact(" ".join(texts), [token])
    assert "qZsecret" not in out and "123" not in out.replace("***", "")


# -- the routes of a running command ---------------------------------------------------------------


def _outputs(capsys, caplog, caught) -> list[str]:
    """Everything that reached the user: stdout, stderr, log records (as formatted and as stored), warnings."""
    out = capsys.readouterr()
    records = [r.getMessage() for r in caplog.records]
    records += [logging.Formatter().format(r) for r in caplog.records]
    return [out.out, out.err, caplog.text, *records, *(str(w.message) for w in caught)]


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


@pytest.fixture
def online(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)


@pytest.fixture(scope="module")
def hub():
    with FakeHub(token=HF_TOKEN) as server:
        yield server


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("shape", list(SHAPES))
@settings(max_examples=3, **SLOW)
@given(data=st.data(), reachable=st.booleans())
def test_push_dataset_never_shows_a_secret_of_its_endpoint(built, online, hub, capsys, caplog, shape, data, reachable):
    pieces, build, label = data.draw(secret_urls((shape,)))
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    capsys.readouterr()
    before = _files(built)
    endpoint = build(hub.url if reachable else unreachable_url())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = main(["push-dataset", str(built), "--repo-id", "user/prop", "--endpoint", endpoint,
                       "--retries", "1", "--retry-wait", "0"])
    texts = _outputs(capsys, caplog, caught)
    assert status in (0, 2)
    assert not leaked(pieces, *texts), (label, endpoint, texts)
    basic = base64.b64encode(endpoint.split("://", 1)[1].split("@", 1)[0].encode()).decode()
    assert not any(basic in t for t in texts if len(basic) > 8)  # nor as the Basic authorization value
    assert _files(built) == before  # nothing written into the folder


@pytest.mark.parametrize("shape", list(SHAPES))
@settings(max_examples=2, **SLOW)
@given(data=st.data())
def test_app_results_repo_never_shows_a_secret_of_its_endpoint(online, hub, capsys, caplog, monkeypatch, shape, data):
    """``app --results-repo`` with the Hub board loaded for real (the browser part stubbed): the board's
    status and text, stderr, log records of the Hub client, and what a library warns or logs about the
    endpoint while the app runs (simulated in the launch stub) carry no piece of the secret."""
    import geofidelity_bench.demo_app as demo_app

    pieces, build, label = data.draw(secret_urls((shape,)))
    endpoint = build(hub.url)
    shown = {}

    def fake_build_app(data, board):
        shown["board"] = (board.status, board.markdown)
        return object()

    def fake_launch(demo, **kwargs):  # a library that warns and logs the URL it was given, from a thread too
        import threading

        warnings.warn(f"could not reach {endpoint}, retrying", UserWarning)
        logging.getLogger("httpx").info("HTTP Request: GET %s/api/whoami \"HTTP/1.1 401\"", endpoint)
        logging.getLogger("uvicorn.error").error("request to %s failed", endpoint, exc_info=ValueError(endpoint))
        worker = threading.Thread(target=lambda: warnings.warn(f"thread: {endpoint}"))
        worker.start()
        worker.join()

    monkeypatch.setattr(demo_app, "load_app_data", lambda *a, **k: object())
    monkeypatch.setattr(demo_app, "build_app", fake_build_app)
    monkeypatch.setattr(demo_app, "launch", fake_launch)
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["app", "--results-repo", "user/results", "--endpoint", endpoint, "--no-cache"]) == 0
    texts = _outputs(capsys, caplog, caught) + list(shown["board"])
    assert any("could not reach" in str(w.message) for w in caught)  # the warning was shown, redacted
    assert not leaked(pieces, *texts), (label, endpoint, texts)


def test_routes_are_restored_after_a_command(capsys):
    """The redaction of warnings and log records holds while a command runs, and is taken off after."""
    before = (warnings.showwarning, logging.getLogRecordFactory())
    assert main(["prompts"]) == 0
    assert (warnings.showwarning, logging.getLogRecordFactory()) == before
    capsys.readouterr()


# -- curate: a token in a nested, encoded paging.next link, on a page that fails -----------------------


@pytest.fixture(scope="module")
def curate_world():
    from test_curation_pipeline import OSM, HELSINKI, OAKLAND  # noqa: F401
    from fake_geo_servers import demo_jpegs, images_along_blocks
    from geofidelity_bench.curation.carving import carve_blocks
    from geofidelity_bench.curation.osm import read_osm_file

    blocks = carve_blocks(read_osm_file(OSM / "west_oakland.osm.bz2"), OAKLAND) + \
        carve_blocks(read_osm_file(OSM / "helsinki.osm.pbf"), HELSINKI)
    records, _ = images_along_blocks(blocks, per_block=9)
    jpegs = demo_jpegs()
    return {"blocks": blocks, "records": records, "osm": OSM,
            "jpegs": {r["id"]: jpegs[i % len(jpegs)] for i, r in enumerate(records)}}


TOKEN_PIECES = st.lists(PIECE, min_size=2, max_size=2)


# (a link nested unencoded is encoded once by the client's query handling: level 1 covers it)
@pytest.mark.parametrize("level, name", [(1, "token"), (2, "access_token"), (3, "key")])
@settings(max_examples=1, **SLOW)
@given(pieces=TOKEN_PIECES, keep_slashes=st.booleans())
def test_curate_never_shows_a_token_echoed_in_a_nested_paging_link(curate_world, tmp_path_factory, monkeypatch, capsys,
                                                                   caplog, pieces, level, keep_slashes, name):
    from fake_geo_servers import FakeMapillary
    from geofidelity_bench.curation.mapillary import MapillaryClient, search_boxes

    token = f"MLY|{pieces[0]}|{pieces[1]}"

    class EchoingMapillary(FakeMapillary):
        """Puts the token, in a URL nested in the query (encoded ``level`` times), into every paging.next."""

        def _send(self, h, method, path, status, body, *args, **kwargs):
            if path.endswith("/images") and status == 200:
                payload = json.loads(body)
                if (payload.get("paging") or {}).get("next"):
                    inner = f"{self.url}/images?after=0&{name}={token}"
                    payload["paging"]["next"] += "&next=" + (encode(inner, level, keep_slashes) if level else inner)
                    body = json.dumps(payload).encode()
            super()._send(h, method, path, status, body, *args, **kwargs)

    monkeypatch.setenv("MAPILLARY_TOKEN", token)
    out = tmp_path_factory.mktemp("curated") / "bench"
    cities = out.parent / "cities.csv"
    cities.write_text("key,country,lat,lon,driving_side\nwest_oakland,US,37.8076,-122.3004,R\n"
                      "helsinki,FI,60.1699,24.9384,R\n", encoding="utf-8")
    with EchoingMapillary(curate_world["records"], curate_world["jpegs"], token, page_size=20) as fake:
        probe = MapillaryClient(token, base_url=fake.url)
        box = next(b for block in curate_world["blocks"] for b in search_boxes(block.polyline)
                   if len(probe.search_box(b)) > 20)  # a box with a second page
        bbox = urlencode({"bbox": ",".join(f"{v:.7f}" for v in box)})
        fake.fail_next(rf"/images[?]{re.escape(bbox)}.*after=", 500, count=10_000)  # that page keeps failing
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        capsys.readouterr()
        osm = curate_world["osm"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = main(["curate", "--city-file", str(cities), "--out", str(out), "--osm-file",
                           f"west_oakland={osm / 'west_oakland.osm.bz2'}", f"helsinki={osm / 'helsinki.osm.pbf'}",
                           "--mapillary-url", fake.url, "--min-images", "5", "--max-images", "8", "--max-workers",
                           "4", "--timeout", "5", "--no-progress", "--retry-delay-scale", "0",
                           "--max-server-retries", "1", "--skip-tier3", "--skip-tier4"])
    texts = _outputs(capsys, caplog, caught)
    assert not leaked(pieces, *texts), texts
    files = _files(out)
    assert "README.md" in files and "curation_summary.json" in files
    assert not {f for f, data in files.items() if leaked(pieces, data)}
    summary = json.loads(files["curation_summary.json"])
    assert status == 1 and summary["failed_searches"]  # the page failed: the run is incomplete
