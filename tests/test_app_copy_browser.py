"""The Score tab's copy warning, end to end in a real headless Chromium: upload copies of the demo's
Berlin photos (the full-resolution originals from ``../shared/real-data`` when they are beside the
checkout, else flipped, cropped and recompressed copies of the stored photos), press Score, and see a
prominent warning naming the matched photos, with each upload and its photo side by side."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import pytest
from PIL import ImageOps

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]
ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it before the tests)"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]
pytest.importorskip("gradio", reason="the app needs gradio (pip install -e '.[app]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser test needs playwright (python)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _berlin_originals() -> list[Path] | None:
    for root in (os.environ.get("GEOFIDELITY_REAL_DATA"), ROOT.parent / "shared" / "real-data"):
        if root and all((Path(root) / "berlin" / f"0{i}.jpg").is_file() for i in (1, 2, 3)):
            return [Path(root) / "berlin" / f"0{i}.jpg" for i in (1, 2, 3)]
    return None


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    from geofidelity_bench.demo_app import build_app, launch, load_app_data

    cache = tmp_path_factory.getbasetemp() / "app-embedding-cache"  # shared with tests/test_app.py
    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache))
    demo = build_app(data)
    port = _free_port()
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/", data
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open_score_tab(page) -> None:
    """Clicks the Score tab; on a narrow screen Gradio moves tabs that do not fit into an overflow menu."""
    page.wait_for_selector('button[role="tab"]')
    tab = page.locator('button[role="tab"]:visible', has_text="Score your images")
    if tab.count():
        tab.first.click()
    else:
        page.locator(".overflow-menu button").first.click()
        page.locator(".overflow-dropdown button", has_text="Score your images").first.click()
    sync_api.expect(page.locator("#score-button")).to_be_visible()


def _uploads(data, tmp_path) -> list[Path]:
    originals = _berlin_originals()
    if originals is not None:
        return originals
    out = []
    for ref in data.benchmark.references_of("berlin_am_lustgarten"):
        img = ImageOps.mirror(ref.image())
        img = img.crop((8, 6, img.width - 12, img.height - 4))
        path = tmp_path / f"{ref.image_id}.jpg"
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=70)
        path.write_bytes(buf.getvalue())
        out.append(path)
    return out


def test_score_tab_warns_about_copied_photos_and_shows_them_side_by_side(app_url, browser, tmp_path):
    url, data = app_url
    files = _uploads(data, tmp_path)
    refs = {r.reference_id for r in data.benchmark.references_of("berlin_am_lustgarten")}
    for width, height in ((1280, 900), (390, 844)):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(60_000)
        sync_api.expect.set_options(timeout=60_000)
        try:
            page.goto(url, wait_until="domcontentloaded")
            _open_score_tab(page)
            block = page.locator("#score-block input")
            block.click()
            block.fill("berlin_am_lustgarten")
            page.get_by_role("option", name="berlin_am_lustgarten — Am Lustgarten, Mitte, Berlin").click()
            page.locator("#score-files input[type=file]").set_input_files([str(f) for f in files])
            for f in files:
                sync_api.expect(page.locator("#score-files")).to_contain_text(f.stem)
            page.locator("#score-button").click()
            warning = page.locator("#score-copy-warning")
            sync_api.expect(warning).to_contain_text(f"{len(files)} of {len(files)} uploaded images are copies of this "
                                                     "benchmark's own photos")
            for ref_id in refs:
                sync_api.expect(warning).to_contain_text(ref_id)
            sync_api.expect(warning).to_be_visible()
            pairs = page.locator("#score-copy-pairs img")
            sync_api.expect(pairs).to_have_count(2 * len(files))
            page.wait_for_function(
                "() => [...document.querySelectorAll('#score-copy-pairs img')].every(i => i.complete && i.naturalWidth > 0)")
            for ref_id in refs:  # each matched photo is captioned under its picture
                sync_api.expect(page.locator("#score-copy-pairs")).to_contain_text(f"benchmark photo: {ref_id}")
            # the scores are still shown, below the warning
            sync_api.expect(page.locator("#score-table")).to_contain_text("CosSim")
            warning.scroll_into_view_if_needed()
            shot = tmp_path / f"score_copy_{width}x{height}.png"
            page.screenshot(path=str(shot), full_page=False)
            page.locator("#score-copy-pairs").scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / f"score_copy_pairs_{width}x{height}.png"), full_page=False)
            print(f"screenshot: {shot}")
            assert shot.stat().st_size > 10_000
        finally:
            page.close()


def test_score_tab_shows_no_copy_warning_for_new_images(app_url, browser, tmp_path):
    import numpy as np
    from PIL import Image

    url, data = app_url
    files = []
    rng = np.random.default_rng(7)
    for i in range(3):  # smooth random colour fields: no photo of the benchmark
        small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        path = tmp_path / f"new_{i}.png"
        Image.fromarray(small).resize((256, 192), Image.Resampling.BICUBIC).save(path)
        files.append(str(path))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(60_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        _open_score_tab(page)
        page.locator("#score-files input[type=file]").set_input_files(files)
        page.locator("#score-button").click()
        sync_api.expect(page.locator("#score-status")).to_contain_text("Scored 3 images", timeout=60_000)
        sync_api.expect(page.locator("#score-copy-warning")).not_to_contain_text("copies")
        sync_api.expect(page.locator("#score-copy-pairs")).to_be_hidden()
    finally:
        page.close()
