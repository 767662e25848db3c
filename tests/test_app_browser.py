"""End to end in a real headless Chromium (Debian's ``chromium``; CI installs it): open the app,
go to the Score tab, pick a demo block, upload demo photos, click Score, see the scores; the chance
sentence and the marks of the Explore and Leaderboard tabs; the Score tab's copy warning."""

from __future__ import annotations

import io
import re
import os
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


try:  # the app's data and server: one per session, shared with tests/test_app.py and test_app_concurrency.py
    from test_app import app_data, server  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_app import app_data, server  # noqa: F401


@pytest.fixture(scope="module")
def app_url(server, app_data):
    return server, app_data


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
    photos = _generated(tmp_path, 4, "generated")  # not copies of the benchmark's photos (those are not scored)

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
        sync_api.expect(ranking).to_contain_text("generated_3.png")
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

        # The uploads stay listed (issue 40): a bad file added to them is answered in the page, naming the file,
        # and the UI keeps working.
        sync_api.expect(page.locator("#score-files")).to_contain_text("generated_0")
        fake = tmp_path / "not_an_image.jpg"
        fake.write_bytes(b"this is text, not a picture\n" * 40)
        page.locator("#score-files input[type=file]").set_input_files([str(fake)])
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
        # the bad file removed from the list, the others score again without being uploaded again
        page.locator("#score-files [aria-label='Remove this file']").last.click()
        sync_api.expect(page.locator("#score-files")).not_to_contain_text("not_an_image")
        page.locator("#score-button").click()
        sync_api.expect(page.locator("#score-status")).to_contain_text("Scored 4 images against lund_seg2")
    finally:
        page.close()


def _generated(folder, n: int, prefix: str) -> list[str]:
    """Smooth random colour fields standing in for generated images: no copy of the benchmark's photos, so the
    app scores them."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(len(prefix) + n)
    out = []
    for i in range(n):
        path = folder / f"{prefix}_{i}.png"
        Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)).resize(
            (256, 192), Image.Resampling.BICUBIC).save(path)
        out.append(str(path))
    return out


def _open_tab(page, name: str) -> None:
    """Clicks a tab: every tab is in the tab bar, on a phone too (it wraps; no overflow menu)."""
    page.get_by_role("tab", name="Explore").wait_for()  # the tab bar is laid out
    page.get_by_role("tab", name=name, exact=True).click()


def _shots_dir(tmp_path):
    """Where screenshots go: $GFB_SCREENSHOTS (to look at them) or the test's temporary folder."""
    from pathlib import Path

    folder = Path(os.environ.get("GFB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# -- the Score tab's copy warning (issue 28 part 1): copies of the demo's Berlin photos (the full-resolution
# originals from ../shared/real-data when they are beside the checkout, else flipped, cropped and recompressed
# copies of the stored photos) are named, with each upload and its photo side by side


def _berlin_originals() -> list[Path] | None:
    for root in (os.environ.get("GEOFIDELITY_REAL_DATA"), ROOT.parent / "shared" / "real-data"):
        if root and all((Path(root) / "berlin" / f"0{i}.jpg").is_file() for i in (1, 2, 3)):
            return [Path(root) / "berlin" / f"0{i}.jpg" for i in (1, 2, 3)]
    return None


def _open_score_tab(page) -> None:
    """Clicks the Score tab and waits for its button."""
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
    """Copies of Berlin's photos: the warning names each and shows it beside its photo, at 1280x900 and (the
    same page, resized) at 390x844. Then new images (smooth random colour fields, no photo of the
    benchmark) scored on that page: no warning, no pairs (the last answer's are gone)."""
    import numpy as np
    from PIL import Image

    url, data = app_url
    files = _uploads(data, tmp_path)
    refs = {r.reference_id for r in data.benchmark.references_of("berlin_am_lustgarten")}
    page = browser.new_page(viewport={"width": 1280, "height": 900})
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
        for width, height in ((1280, 900), (390, 844)):  # one answer, shown at both widths
            page.set_viewport_size({"width": width, "height": height})
            sync_api.expect(warning).to_be_visible()
            pairs = page.locator("#score-copy-pairs img")
            sync_api.expect(pairs).to_have_count(2 * len(files))
            page.locator("#score-copy-pairs").scroll_into_view_if_needed()  # the images load lazily, once near the screen
            page.wait_for_function(
                "() => [...document.querySelectorAll('#score-copy-pairs img')].every(i => i.complete && i.naturalWidth > 0)")
            for ref_id in refs:  # each matched photo is captioned under its picture
                sync_api.expect(page.locator("#score-copy-pairs")).to_contain_text(f"benchmark photo: {ref_id}")
            # a copy is never a result: nothing is scored (issue 40)
            sync_api.expect(warning).to_contain_text("Nothing is scored")
            sync_api.expect(page.locator("#score-table")).not_to_contain_text("CosSim")
            warning.scroll_into_view_if_needed()
            shot = tmp_path / f"score_copy_{width}x{height}.png"
            page.screenshot(path=str(shot), full_page=False)
            page.locator("#score-copy-pairs").scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / f"score_copy_pairs_{width}x{height}.png"), full_page=False)
            print(f"screenshot: {shot}")
            assert shot.stat().st_size > 10_000

        # new images: no copy warning (four of them: the status must tell this answer from the last, of 3 images)
        assert len(files) == 3
        page.set_viewport_size({"width": 1280, "height": 900})
        new = []
        rng = np.random.default_rng(7)
        for i in range(4):  # smooth random colour fields: no photo of the benchmark
            small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
            path = tmp_path / f"new_{i}.png"
            Image.fromarray(small).resize((256, 192), Image.Resampling.BICUBIC).save(path)
            new.append(str(path))
        page.locator("#score-files button[aria-label='Clear']").click()  # the copies stay listed until removed
        page.locator("#score-files input[type=file]").set_input_files(new)
        sync_api.expect(page.locator("#score-files")).to_contain_text("new_3")
        page.locator("#score-button").click()
        sync_api.expect(page.locator("#score-status")).to_contain_text("Scored 4 images", timeout=60_000)
        sync_api.expect(page.locator("#score-copy-warning")).not_to_contain_text("copies")
        sync_api.expect(page.locator("#score-copy-pairs")).to_be_hidden()
    finally:
        page.close()


# -- issue 31 sections 1-2: every tab at 1280x900 and at 390x844 --------------------------------------------

#: Visible elements whose right edge is beyond the viewport, unless inside a container that scrolls
#: sideways (and itself fits); plus the page's own width. An empty list: nothing overflows the page.
OVERFLOW_JS = """() => {
  const W = window.innerWidth, bad = [];
  const page = document.documentElement.scrollWidth;
  if (page > W) bad.push('page: scrollWidth ' + page + ' > ' + W);
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '');
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= W + 1) continue;
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    let p = el.parentElement, inside = false;
    while (p && p !== document.body) {
      const ox = getComputedStyle(p).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && p.getBoundingClientRect().right <= W + 1) { inside = true; break; }
      p = p.parentElement;
    }
    if (!inside) bad.push(name(el) + ' ends at ' + Math.round(r.right) + ': ' + (el.innerText || '').slice(0, 40));
  }
  return bad;
}"""
#: The number of text lines of an element (distinct tops of its text's boxes).
LINES_JS = """e => { const r = document.createRange(); r.selectNodeContents(e);
  return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size; }"""
APP_TABS = ("Explore", "Score your images", "Leaderboard", "Submit", "About")


def _images_loaded(page, selector: str) -> None:
    for img in page.locator(selector).all():
        img.scroll_into_view_if_needed()
    page.wait_for_function(
        "s => [...document.querySelectorAll(s)].every(i => i.complete && i.naturalWidth > 0)", arg=selector)


def _every_tab_in_the_bar(page, tabs, width: int) -> None:
    """Each tab is in the tab bar itself, on screen: one tap away (no "More tabs" menu)."""
    for name in tabs:
        tab = page.get_by_role("tab", name=name, exact=True)
        sync_api.expect(tab).to_be_visible()
        box = tab.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
    assert not page.locator(".overflow-menu button").first.is_visible()


def _no_overflow(page, what: str) -> None:
    bad = page.evaluate(OVERFLOW_JS)
    assert bad == [], f"{what}: {bad[:10]}"


@pytest.mark.parametrize("viewport", [(1280, 900), (390, 844)], ids=["laptop", "phone"])
def test_every_tab_fits_and_reads_at_both_widths(app_url, browser, tmp_path, viewport):
    """Every tab one tap away; nothing wider than the page; plots at their own aspect ratio with their
    captions under them; gallery captions whole; the Submit tab rendered and true for this app (no Hub
    tab); one number format with n/a in the leaderboard; the About headers on one line. The Explore and
    Leaderboard tabs say the chance level and mark the held-out panels that repeat photos. Screenshots of
    every tab go to $GFB_SCREENSHOTS (to look at them)."""
    import re

    from geofidelity_bench.caveats import REPEATS_MARK

    url, data = app_url
    width, height = viewport
    thin = data.thin_anchor_blocks()
    n_blocks = len(data.benchmark.blocks)
    shots = _shots_dir(tmp_path)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(30_000)
    sync_api.expect.set_options(timeout=30_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Explore").wait_for()
        _every_tab_in_the_bar(page, APP_TABS, width)
        assert page.get_by_role("tab", name="Hub leaderboard").count() == 0  # no --results-repo here

        # Explore: the first block of the first city; its anchors say the chance level and, when it is thin, the mark
        explore = page.locator("#explore-meta")
        sync_api.expect(explore).to_contain_text("by chance here")
        first_block = page.locator("input[aria-label='Block']").first.input_value().split(" ")[0]
        if first_block in thin:
            sync_api.expect(explore).to_contain_text(f"heldout_real {REPEATS_MARK}")
            sync_api.expect(explore).to_contain_text("so its held-out panel repeats photos")
        sync_api.expect(explore).to_contain_text(f"{len(thin)} of {n_blocks} block(s) have fewer "
                                                 "held-out photos than the panel size")
        explore.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"explore_{width}x{height}.png"), full_page=True)
        # the photos' captions are whole (not cut with an ellipsis)
        captions = page.locator("#explore-gallery .caption-label")
        sync_api.expect(captions.first).to_contain_text("HELD-OUT")
        _images_loaded(page, "#explore-gallery img")
        for cap in captions.all():
            assert cap.evaluate("e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"), \
                cap.inner_text()
        sync_api.expect(page.locator("#explore-gallery")).to_contain_text("gallery · ")
        page.evaluate("() => window.scrollTo(0, 0)")
        _no_overflow(page, "Explore")
        page.screenshot(path=str(shots / f"tab_explore_{width}x{height}.png"), full_page=True)

        _open_tab(page, "Score your images")
        sync_api.expect(page.locator("#score-button")).to_be_visible()
        _no_overflow(page, "Score")
        page.screenshot(path=str(shots / f"tab_score_{width}x{height}.png"), full_page=True)

        # Leaderboard: the chance columns, the repeated-photos mark and the notes that explain them
        _open_tab(page, "Leaderboard")
        # the table on a wide screen, its rows as cards on a phone (issue 40)
        table = page.locator("#lb-table" if width > 700 else "#lb-cards")
        sync_api.expect(table).to_be_visible()
        sync_api.expect(table).to_contain_text("chance acc")
        sync_api.expect(table).to_contain_text("chance MRR")
        sync_api.expect(table).to_contain_text(f"{REPEATS_MARK} ({len(thin)} of {n_blocks} blocks)")
        notes = page.locator("#lb-notes")
        sync_api.expect(notes).to_contain_text("Chance:")
        sync_api.expect(notes).to_contain_text("ties count against the target")
        sync_api.expect(notes).to_contain_text(f"{REPEATS_MARK}:")
        sync_api.expect(page.locator("#lb-source")).to_contain_text("Produced on benchmark")
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"leaderboard_{width}x{height}.png"), full_page=False)
        # each plot at its own aspect ratio (never stretched, never in a square box), caption below
        _images_loaded(page, "#lb-plots img")
        plots = page.locator("#lb-plots img")
        assert plots.count() >= 3
        for img in plots.all():
            nat_w, nat_h, w, h, cap_top = img.evaluate(
                "i => { const r = i.getBoundingClientRect(); const c = i.parentElement.querySelector('.caption-label');"
                " return [i.naturalWidth, i.naturalHeight, r.width, r.height, c ? c.getBoundingClientRect().top : 1e9]; }")
            assert abs(w / h - nat_w / nat_h) < 0.02 * nat_w / nat_h, (nat_w, nat_h, w, h)
            assert w <= nat_w + 1  # never blown up beyond its pixels
            box = img.bounding_box()
            assert cap_top >= box["y"] + box["height"] - 1  # the caption is under the plot, not over it
        # numbers: one format (three decimals) or n/a, never a blank cell (GAAS is not computed by the demo)
        shown = table.inner_text()
        decimals = re.findall(r"(?<![\w.])-?\d+\.(\d+)(?![\w.])", shown)
        assert decimals and all(len(d) == 3 for d in decimals), sorted(set(decimals))
        assert "n/a" in shown  # GAAS (tests/test_app.py checks every cell)
        page.evaluate("() => window.scrollTo(0, 0)")
        _no_overflow(page, "Leaderboard")
        page.screenshot(path=str(shots / f"tab_leaderboard_{width}x{height}.png"), full_page=True)

        # Submit: rendered Markdown (no code editor), true for this app: it has no Hub leaderboard tab
        _open_tab(page, "Submit")
        submit = page.locator("#submit-text")
        sync_api.expect(submit).to_contain_text("geofidelity-bench push-results results --repo-id ORG/NAME")
        assert submit.locator(".cm-editor, .cm-gutters").count() == 0
        assert submit.locator("h3", has_text="Submit your model").count() == 1
        assert "###" not in submit.inner_text() and "```" not in submit.inner_text()
        sync_api.expect(submit).to_contain_text("started without --results-repo")
        sync_api.expect(submit).not_to_contain_text("Hub leaderboard tab")
        for pre in submit.locator("pre").all():  # each command is whole: wrapped, or scrolling inside its box
            assert pre.evaluate("e => getComputedStyle(e).overflowX === 'auto' || e.scrollWidth <= e.clientWidth + 1")
        _no_overflow(page, "Submit")
        page.screenshot(path=str(shots / f"tab_submit_{width}x{height}.png"), full_page=True)

        # About: each header on one line ("range", never "rang / e")
        _open_tab(page, "About")
        about = page.locator("#about")
        sync_api.expect(about).to_contain_text("What GeoFidelity-Bench measures")
        for th in about.locator("th").all():  # (a phone shows the rows as cards, without the header row)
            assert not th.is_visible() or th.evaluate(LINES_JS) == 1, th.inner_text()
        for td in about.locator("tbody tr").first.locator("td").all():  # no word broken inside ("CosSi / m")
            word_lines = td.evaluate("e => e.innerText.split(/\\s+/).length")
            assert td.evaluate(LINES_JS) <= word_lines, td.inner_text()
        _no_overflow(page, "About")
        page.screenshot(path=str(shots / f"tab_about_{width}x{height}.png"), full_page=True)
    finally:
        page.close()


def test_score_values_are_visible_after_scoring_four_images(app_url, browser, tmp_path):
    """On a phone (390x844): a block picked from the list, four images scored; the chance sentence is there,
    and every score's name, value, meaning and comparison lies within the screen's width (each score is a
    card), and nothing overflows the page. The same answer on that page resized to 1280x900 likewise."""
    from geofidelity_bench.demo_app.texts import SCORES

    url, data = app_url
    shots = _shots_dir(tmp_path)
    photos = _generated(tmp_path, 4, "four")
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.set_default_timeout(60_000)
    sync_api.expect.set_options(timeout=60_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        _open_tab(page, "Score your images")
        block = page.locator("#score-block input")
        block.click()
        block.fill("berlin_am_lustgarten")
        page.get_by_role("option", name="berlin_am_lustgarten — Am Lustgarten, Mitte, Berlin").first.click()
        page.locator("#score-files input[type=file]").set_input_files(photos)
        sync_api.expect(page.locator("#score-files")).to_contain_text("four_3")
        page.locator("#score-button").click()
        sync_api.expect(page.locator("#score-status")).to_contain_text("Scored 4 images against berlin_am_lustgarten")
        table = page.locator("#score-table")
        sync_api.expect(table).to_contain_text("by chance here")
        rows = page.locator("#score-table tbody tr")
        sync_api.expect(rows).to_have_count(len(SCORES))
        for width, height in ((390, 844), (1280, 900)):  # one answer, shown at both widths
            page.set_viewport_size({"width": width, "height": height})
            sync_api.expect(table).to_contain_text("by chance here")
            table.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"score_{width}x{height}.png"), full_page=True)
            for row in rows.all():
                cells = row.locator("td")
                value = cells.nth(1)
                value.scroll_into_view_if_needed()
                sync_api.expect(value).to_be_visible()
                text = value.inner_text().strip()
                assert text == "n/a" or text.lstrip("+-").replace(".", "", 1).isdigit(), text
                for i in range(4):
                    box = cells.nth(i).bounding_box()
                    assert box and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, (width, row.inner_text(), i, box)
                    assert box["height"] < 400, (width, row.inner_text(), i, box)  # never a column of one word per line
            page.evaluate("() => window.scrollTo(0, 0)")
            _no_overflow(page, f"Score (scored) at {width}x{height}")
            page.locator("#score-table").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"tab_score_scored_{width}x{height}.png"), full_page=True)
    finally:
        page.close()


def test_a_block_picked_while_the_first_one_loads_is_the_one_shown(app_url, browser, monkeypatch):
    """The page's first block is still loading (its map slow) when the user picks another city: the block the
    pickers show is the one whose facts, map and photos end up on the page (a pick during a pending load was
    dropped before, leaving the first block's facts under the second block's name)."""
    import threading
    import time

    from geofidelity_bench.demo_app import figures

    url, data = app_url
    first = data.benchmark.block_ids[0]
    berlin = next(b for b in data.benchmark.block_ids if b.startswith("berlin"))
    assert first != berlin
    released = threading.Event()
    real_map = figures.block_map_figure

    def slow_for_the_first_block(bench, block_id, *args, **kwargs):
        if block_id == first:
            released.wait(timeout=20)  # until the other city has been picked
        return real_map(bench, block_id, *args, **kwargs)

    monkeypatch.setattr(figures, "block_map_figure", slow_for_the_first_block)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Explore").wait_for()
        page.locator("input[aria-label='City']").click()
        page.get_by_role("option", name="Berlin").first.click()
        sync_api.expect(page.locator("input[aria-label='Block']")).to_have_value(re.compile("^" + berlin))
        time.sleep(1.0)  # the pick's events reach the server while the first block is still loading
        released.set()
        sync_api.expect(page.locator("#explore-meta")).to_contain_text(berlin, timeout=30_000)
        sync_api.expect(page.locator("#explore-meta")).not_to_contain_text(first)
    finally:
        released.set()
        page.close()
