"""The app under concurrent visitors (issue 29, section 3): identical uploads of several visitors share
one path in Gradio's upload folder; every request still scores (each on its own copy), and the shared
upload stays while any visitor lists it (issue 40). A real Gradio server on 127.0.0.1, driven by gradio_client
from threads."""

from __future__ import annotations

import threading
import uuid

import pytest

pytest.importorskip("gradio_client", reason="the API tests need gradio_client (pip install -e '.[app]')")

try:
    from test_app import _files, _found_in_upload_folder, _fresh, _handles, app_data, server  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_app import _files, _found_in_upload_folder, _fresh, _handles, app_data, server  # noqa: F401

pytestmark = [
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]
#: more visitors than the queue runs at once (ui.CONCURRENCY), so that requests run side by side and wait
VISITORS = 4


def test_concurrent_visitors_uploading_the_same_files_all_get_scored(server, app_data, tmp_path):
    from gradio_client import Client

    from geofidelity_bench.demo_app.ui import CONCURRENCY

    assert VISITORS >= 2 * CONCURRENCY
    tag = uuid.uuid4().hex[:12]
    photos = _files(tmp_path, _fresh(2, seed=21, prefix=f"same_{tag}"))  # not copies: scored
    clients = [Client(server, verbose=False, download_files=False, analytics_enabled=False) for _ in range(VISITORS)]
    # every visitor uploads the same files first (one shared path each in the upload folder), then all score
    uploaded = [c.predict("lund_seg2", _handles(photos), api_name="/score") for c in clients[:1]]
    jobs = [c.submit("lund_seg2", _handles(photos), api_name="/score") for c in clients]
    results, errors = [], []
    lock = threading.Lock()

    def wait(job):
        try:
            out = job.result(timeout=300)
            with lock:
                results.append(out)
        except Exception as err:  # noqa: BLE001 - collected and shown below
            with lock:
                errors.append(str(err))

    threads = [threading.Thread(target=wait, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], errors
    assert len(results) == VISITORS
    # the same images, the same numbers, for every visitor (and as for the first, sequential request)
    first = uploaded[0][7]["scores"]
    assert all(r[7]["scores"] == first for r in results)
    assert all("Scored **2 images**" in r[0] for r in results)
    # one shared path per file, kept while the visitors list them (none deleted it under another's feet)
    assert len(_found_in_upload_folder(f"same_{tag}_*")) == 2


def _answer_folders(kind: str) -> set:
    from geofidelity_bench.demo_app.uploads import default_upload_root

    return {p for p in default_upload_root().glob(f"geofidelity-{kind}-*") if p.is_dir()}


def test_thumbnails_and_plots_are_deleted_at_the_next_answer(server, app_data, tmp_path):
    """The images of an answer stay while the page may fetch them, and are deleted when the same visitor's
    next answer replaces them; another visitor's images are never touched."""
    import httpx
    from gradio_client import Client

    tag = uuid.uuid4().hex[:12]
    photos = _files(tmp_path, _fresh(2, seed=22, prefix=f"thumb_{tag}"))  # not copies: scored, with thumbnails
    me, other = (Client(server, verbose=False, download_files=False, analytics_enabled=False) for _ in range(2))
    before = _answer_folders("score")
    shown = me.predict("lund_seg2", _handles(photos), api_name="/score")[5]
    theirs = other.predict("lund_seg2", _handles(photos), api_name="/score")[5]
    paths = [item["image"]["path"] for item in shown]
    mine = {str(__import__("pathlib").Path(p).parent) for p in paths}
    assert len(paths) == 2 and len(mine) == 1 and all("geofidelity-score-" in p for p in paths)
    # served after the answer: the browser fetches the thumbnail by its URL
    assert httpx.get(shown[0]["image"]["url"]).status_code == 200
    first = _answer_folders("score") - before
    assert len(first) == 2  # one folder per visitor
    me.predict("lund_seg2", _handles(photos), api_name="/score")
    now = _answer_folders("score") - before
    assert {str(p) for p in first - now} == mine  # my first answer's images are gone, only they
    assert httpx.get(theirs[0]["image"]["url"]).status_code == 200  # the other visitor's still shows
    assert len(now) == 2
    # the report plots of an uploaded table likewise
    app_data.results.to_csv(tmp_path / f"results_{tag}.csv", index=False)
    plots_before = _answer_folders("report")
    me.predict(_handles([str(tmp_path / f"results_{tag}.csv")])[0], api_name="/upload_results")
    me.predict(api_name="/reset_results")
    assert len(_answer_folders("report") - plots_before) == 1  # the first answer's plots were deleted
