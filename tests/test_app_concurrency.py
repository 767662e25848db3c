"""The app under concurrent visitors (issue 29, section 3): identical uploads of several visitors share
one path in Gradio's upload folder; every request still scores (each on its own copy), and no upload
is left behind. A real Gradio server on 127.0.0.1, driven by gradio_client from threads."""

from __future__ import annotations

import threading
import uuid

import pytest

pytest.importorskip("gradio_client", reason="the API tests need gradio_client (pip install -e '.[app]')")

try:
    from test_app import _files, _found_in_upload_folder, _handles, app_data, server  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_app import _files, _found_in_upload_folder, _handles, app_data, server  # noqa: F401

pytestmark = [
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]
VISITORS = 8


def test_concurrent_visitors_uploading_the_same_files_all_get_scored(server, app_data, tmp_path):
    from gradio_client import Client

    tag = uuid.uuid4().hex[:12]
    held = app_data.benchmark.heldout("lund_seg2")
    photos = _files(tmp_path, {f"same_{tag}_{i}.jpg": r.image_bytes for i, r in enumerate(held[:2])})
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
    assert _found_in_upload_folder(f"same_{tag}_*") == []  # no upload is kept
