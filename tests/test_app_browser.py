"""End to end in a real headless Chromium (Debian's ``chromium``; CI installs it): open the app,
go to the Score tab, pick a demo block, upload demo photos, click Score, see the scores; the chance
sentence and the marks of the Explore and Leaderboard tabs; the Score tab's copy warning."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import pytest
from PIL import ImageOps

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it before the tests)",
    ),
    # Gradio's queue (not this project) uses pandas options that pandas 3 deprecates.
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]
pytest.importorskip("gradio", reason="the app needs gradio (pip install -e '.[app]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser test needs playwright (python)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def test_score_tab_end_to_end(app_url, browser, tmp_path):
    url, data = app_url
    photos = []
    for i, world in enumerate(data.benchmark.world[:4]):
        path = tmp_path / f"generated_{i}.jpg"
        path.write_bytes(world.image_bytes)
        photos.append(str(path))

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    sync_api.expect.set_options(timeout=30_000)  # scoring on a busy CI machine can take longer than 5 s
    try:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Score your images").click()

        block = page.locator("#score-block input")
        block.click()
        block.fill("lund_seg2")
        page.get_by_role("option", name="lund_seg2 — Lund, residential").click()
        sync_api.expect(block).to_have_value("lund_seg2 — Lund, residential")

        page.locator("#score-files input[type=file]").set_input_files(photos)
        for i in range(4):  # every upload is listed (name and extension in separate elements) before scoring
            sync_api.expect(page.locator("#score-files")).to_contain_text(f"generated_{i}")

        page.locator("#score-button").click()
        table = page.locator("#score-table")
        sync_api.expect(table).to_contain_text("of 4 images picked the target block out of 5 candidates (4 distinct blocks)")
        # chance next to the retrieval numbers: lund_seg3 fills two of lund_seg2's roles, so 4 distinct blocks rank
        sync_api.expect(table).to_contain_text("1 in 4 by chance here (5 candidates, 4 distinct blocks: a block "
                                               "filling two roles ranks twice, ties count against the target)")
        sync_api.expect(table).to_contain_text("0.48 by chance here")  # MRR: tests/test_app.py brute-forces it
        sync_api.expect(page.locator("#score-status")).to_contain_text("Scored 4 images against lund_seg2")
        for label in ("CosSim", "DCSF", "Retrieval accuracy", "Local margin", "held-out real photos of this block"):
            sync_api.expect(table).to_contain_text(label)
        ranking = page.locator("#score-ranking")
        sync_api.expect(ranking).to_contain_text("generated_3.jpg")
        sync_api.expect(ranking).to_contain_text("of 5")
        sync_api.expect(page.locator("#score-plot img").first).to_be_visible()
        thumbs = page.locator("#score-shown img")
        sync_api.expect(thumbs).to_have_count(4)
        thumbs.last.scroll_into_view_if_needed()
        page.wait_for_function(
            "() => [...document.querySelectorAll('#score-shown img')].every(i => i.complete && i.naturalWidth > 0)")
        shot = tmp_path / "score_tab.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000

        # The uploads were deleted once read, and the file list is empty again (it lists nothing that is gone).
        sync_api.expect(page.locator("#score-files")).not_to_contain_text("generated_0")
        # A bad upload is answered in the page, naming the file, and the UI keeps working.
        fake = tmp_path / "not_an_image.jpg"
        fake.write_bytes(b"this is text, not a picture\n" * 40)
        page.locator("#score-files input[type=file]").set_input_files([photos[0], str(fake)])
        sync_api.expect(page.locator("#score-files")).to_contain_text("not_an_image")
        page.locator("#score-button").click()
        sync_api.expect(page.get_by_text("not_an_image.jpg is not an image").first).to_be_visible()
        status = page.locator("#score-status")
        sync_api.expect(status).to_contain_text("Not scored.")
        # the reason stays next to the results, not only in the toast that vanishes
        sync_api.expect(status).to_contain_text("not_an_image.jpg is not an image")
        sync_api.expect(table).not_to_contain_text("picked the target block")  # no stale scores left
        status.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "score_error.png"), full_page=False)
        print(f"screenshot: {tmp_path / 'score_error.png'}")
        page.locator(".toast-close").first.click()  # the toast goes; the reason stays
        sync_api.expect(page.get_by_text("not_an_image.jpg is not an image")).to_have_count(1)
        sync_api.expect(status).to_contain_text("not_an_image.jpg is not an image")
        sync_api.expect(page.locator("#score-ranking")).not_to_contain_text("Error")  # no bare red pills
        page.screenshot(path=str(tmp_path / "score_error_after_toast.png"), full_page=False)
    finally:
        page.close()


def _open_tab(page, name: str) -> None:
    """Clicks a tab, through Gradio's overflow menu ("...") when a narrow screen hides it there."""
    page.get_by_role("tab", name="Explore").wait_for()  # the tab bar is laid out (the first tab always shows)
    tab = page.get_by_role("tab", name=name)
    if not tab.is_visible():
        page.locator(".overflow-menu > button").first.click()
        page.locator(".overflow-dropdown button", has_text=name).first.click()
    else:
        tab.click()


def _shots_dir(tmp_path):
    """Where screenshots go: $GFB_SCREENSHOTS (to look at them) or the test's temporary folder."""
    from pathlib import Path

    folder = Path(os.environ.get("GFB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("viewport", [(1280, 900), (390, 844)], ids=["desktop", "phone"])
def test_explore_and_leaderboard_show_chance_and_marks(app_url, browser, tmp_path, viewport):
    from geofidelity_bench.caveats import REPEATS_MARK

    url, data = app_url
    thin = data.thin_anchor_blocks()
    shots = _shots_dir(tmp_path)
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.set_default_timeout(30_000)
    sync_api.expect.set_options(timeout=30_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        # Explore: the first block of the first city; its anchors say the chance level and, when it is thin, the mark
        explore = page.locator("#explore-meta")
        sync_api.expect(explore).to_contain_text("by chance here")
        first_block = page.locator("input[aria-label='Block']").first.input_value().split(" ")[0]
        if first_block in thin:
            sync_api.expect(explore).to_contain_text(f"heldout_real {REPEATS_MARK}")
            sync_api.expect(explore).to_contain_text("so its held-out panel repeats photos")
        sync_api.expect(explore).to_contain_text(f"{len(thin)} of {len(data.benchmark.blocks)} block(s) have fewer "
                                                 "held-out photos than the panel size")
        explore.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"explore_{viewport[0]}x{viewport[1]}.png"), full_page=True)

        _open_tab(page, "Leaderboard")
        table = page.locator("#lb-table")
        sync_api.expect(table).to_contain_text("chance acc")
        sync_api.expect(table).to_contain_text("chance MRR")
        sync_api.expect(table).to_contain_text(f"{REPEATS_MARK} ({len(thin)} of {len(data.benchmark.blocks)} blocks)")
        notes = page.locator("#lb-notes")
        sync_api.expect(notes).to_contain_text("Chance:")
        sync_api.expect(notes).to_contain_text("ties count against the target")
        sync_api.expect(notes).to_contain_text(f"{REPEATS_MARK}:")
        sync_api.expect(page.locator("#lb-source")).to_contain_text("Produced on benchmark")
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"leaderboard_{viewport[0]}x{viewport[1]}.png"), full_page=False)
        print(f"screenshots: {shots}")
    finally:
        page.close()


def test_score_tab_chance_on_a_phone(app_url, browser, tmp_path):
    """The chance sentence is there (and readable) at 390x844 too."""
    url, data = app_url
    shots = _shots_dir(tmp_path)
    photos = []
    for i, world in enumerate(data.benchmark.world[4:7]):
        path = tmp_path / f"phone_{i}.jpg"
        path.write_bytes(world.image_bytes)
        photos.append(str(path))
    for viewport in ((390, 844), (1280, 900)):
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        page.set_default_timeout(30_000)
        sync_api.expect.set_options(timeout=30_000)
        try:
            page.goto(url, wait_until="domcontentloaded")
            _open_tab(page, "Score your images")
            block = page.locator("#score-block input")
            block.click()
            block.fill("berlin_am_lustgarten")
            page.get_by_role("option", name="berlin_am_lustgarten — Am Lustgarten, Mitte, Berlin").first.click()
            page.locator("#score-files input[type=file]").set_input_files(photos)
            sync_api.expect(page.locator("#score-files")).to_contain_text("phone_2")
            page.locator("#score-button").click()
            table = page.locator("#score-table")
            sync_api.expect(table).to_contain_text("by chance here")
            table.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"score_{viewport[0]}x{viewport[1]}.png"), full_page=True)
        finally:
            page.close()


# -- the Score tab's copy warning (issue 28 part 1): copies of the demo's Berlin photos (the full-resolution
# originals from ../shared/real-data when they are beside the checkout, else flipped, cropped and recompressed
# copies of the stored photos) are named, with each upload and its photo side by side


def _berlin_originals() -> list[Path] | None:
    for root in (os.environ.get("GEOFIDELITY_REAL_DATA"), ROOT.parent / "shared" / "real-data"):
        if root and all((Path(root) / "berlin" / f"0{i}.jpg").is_file() for i in (1, 2, 3)):
            return [Path(root) / "berlin" / f"0{i}.jpg" for i in (1, 2, 3)]
    return None


def _open_score_tab(page) -> None:
    """Clicks the Score tab; on a narrow screen Gradio moves tabs that do not fit into an overflow menu."""
    _open_tab(page, "Score your images")
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
