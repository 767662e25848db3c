"""Issue 40 in a real headless Chromium (a real Gradio server on 127.0.0.1), at 1280x900 and at 390x844:

- the Score tab never presents a copy as a result: uploads that copy the benchmark's photos are left out of the
  "In short" line, the score table, the per-image ranking, the thumbnails and the plot (the others scored when
  at least two remain, nothing when fewer), and the warning sits at the top of the answer, on screen;
- the Score plot draws the block's chance level on retrieval accuracy and MRR, and no label covers it;
- no empty warning box in any state but a copy result;
- a text file named .png uploaded alone is named as "not an image"; the uploads stay listed after a refusal and
  after an answer; an error message never covers the title;
- the leaderboard fits a 1280 px screen, and rows that are not ranked (copied) have no rank;
- on a phone every key table (Leaderboard, Explore's block and anchor tables, About's tables and citation)
  shows each number and its mark inside the screen's width, without scrolling sideways; Explore's pickers show
  their values whole.

One server (tests/test_app.py's) and one browser for the module; screenshots of each state go to
$GFB_SCREENSHOTS (to look at them) or the test's temporary folder.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

try:  # the browser, the app's server and its helpers: tests/test_app_browser.py's
    from test_app import app_data, server  # noqa: F401
    from test_app_browser import _generated, _open_tab, _shots_dir, _uploads, app_url, browser, pytestmark  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_app import app_data, server  # noqa: F401
    from tests.test_app_browser import _generated, _open_tab, _shots_dir, _uploads, app_url, browser, pytestmark  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

VIEWPORTS = [(1280, 900), (390, 844)]
VIEWPORT_IDS = ["laptop", "phone"]
BERLIN = "berlin_am_lustgarten"
#: the colour of a chance line (the report's leaderboard.png and the app's Score plot)
CHANCE_RGB = (0xC4, 0x4E, 0x52)

#: [how many visible elements matched by a selector were checked, why each cannot be read on the screen as it is:
#: its box beyond the screen's width, inside a container that scrolls sideways (or cuts it), or covered].
UNREADABLE_JS = """sel => {
  const W = window.innerWidth, bad = [];
  let checked = 0;
  for (const el of document.querySelectorAll(sel)) {
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    el.scrollIntoView({block: 'center', inline: 'nearest'});
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    checked += 1;
    const what = (el.innerText || '').trim().slice(0, 50);
    if (r.left < -1 || r.right > W + 1) { bad.push(`${what}: spans ${Math.round(r.left)}-${Math.round(r.right)} of ${W}`); continue; }
    let p = el, cut = null;  // the element itself (a code block) or a container around it
    while (p && p !== document.body) {
      const ox = getComputedStyle(p).overflowX;
      if (ox !== 'visible' && p.scrollWidth > p.clientWidth + 1) { cut = p; break; }
      p = p.parentElement;
    }
    if (cut) { bad.push(`${what}: inside ${cut.tagName.toLowerCase()}#${cut.id}.${cut.className} that scrolls sideways (${cut.scrollWidth} > ${cut.clientWidth})`); continue; }
    const hit = document.elementFromPoint(Math.min(Math.max(r.left + r.width / 2, 0), W - 1), r.top + Math.min(r.height / 2, 8));
    if (!hit || !(el.contains(hit) || hit.contains(el))) bad.push(`${what}: covered by ${hit ? hit.tagName + '.' + hit.className : 'nothing'}`);
  }
  return [checked, bad];
}"""
#: The page's boxes of the title block (the header's Markdown: title and the line under it) and of every toast.
TITLE_AND_TOASTS_JS = """() => {
  const h1 = document.querySelector('h1');
  const head = h1.closest('.prose') || h1;
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const toasts = [...document.querySelectorAll('.toast-body, [data-testid=toast-body]')]
    .filter(t => t.checkVisibility()).map(box);
  return [box(head), toasts];
}"""


#: How long a check waits for what it expects (the page has its answer already).
T = 5_000


class Soft:
    """Checks that each run (a failing one does not stop the next); :meth:`done` fails listing all that failed."""

    def __init__(self):
        self.failed: list[str] = []

    def check(self, what: str, fn) -> None:
        try:
            fn()
        except (AssertionError, sync_api.Error) as err:  # a failed check, or what it looks for is not there
            self.failed.append(f"{what}: {' '.join(str(err).split())[:300]}")

    def done(self) -> None:
        assert not self.failed, f"{len(self.failed)} check(s) failed:\n" + "\n".join(self.failed)


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _pick_block(page, block_id: str) -> None:
    block = page.locator("#score-block input")
    block.click()
    block.fill(block_id)
    page.get_by_role("option", name=f"{block_id} — ").first.click()
    expect(block).to_have_value(re.compile("^" + re.escape(block_id) + " "))


def _add_files(page, files) -> None:
    """Adds files to the Score tab's list (a multiple-file list keeps what it listed)."""
    page.locator("#score-files input[type=file]").set_input_files([str(f) for f in files])
    for f in files:
        expect(page.locator("#score-files")).to_contain_text(Path(f).stem)


def _clear_files(page) -> None:
    clear = page.locator("#score-files button[aria-label='Clear']")
    if clear.count():
        clear.first.click()
    expect(page.locator("#score-files button[aria-label='Remove this file']")).to_have_count(0)


#: Records every text the Score tab's status shows from now on (it reads "Scoring ..." while the answer comes).
WATCH_STATUS_JS = """() => {
  window.gfbStatusSeen = [];
  const el = document.querySelector('#score-status');
  new MutationObserver(() => window.gfbStatusSeen.push(el.innerText))
    .observe(el, {childList: true, subtree: true, characterData: true});
}"""
ANSWERED_JS = """() => { const now = document.querySelector('#score-status').innerText;
  return window.gfbStatusSeen.some(t => t.includes('Scoring ...')) && !now.includes('Scoring ...') && now.trim() !== ''; }"""


def _press_score(page) -> None:
    """Presses Score and waits for the answer (or the refusal) to replace "Scoring ..."."""
    page.evaluate(WATCH_STATUS_JS)
    page.locator("#score-button").click()
    page.wait_for_function(ANSWERED_JS)


def _toasts_clear_of_the_title(page) -> None:
    title, toasts = page.evaluate(TITLE_AND_TOASTS_JS)
    assert toasts and not any(_overlap(title, t) for t in toasts), (title, toasts)


def _on_screen_top(locator, height: int) -> None:
    box = locator.bounding_box()
    assert box and 0 <= box["y"] <= height - 120, f"it starts at {box} of a {height} px screen"


def _no_empty_box(page, state: str) -> None:
    """The copy warning's box is drawn only around a warning: no orange border, no padding, no height else."""
    box = page.locator("#score-copy-warning").evaluate(
        "e => { const s = getComputedStyle(e), r = e.getBoundingClientRect();"
        " return [r.height, s.borderTopWidth, s.visibility, e.innerText.trim()]; }")
    height, border, visibility, text = box
    assert text == "", (state, text)
    assert height <= 1 or border == "0px" and visibility == "hidden", (state, box)


def _plot_image(page, which: str) -> Image.Image:
    """The Score plot's picture as the page shows it (its data URL or the file it names)."""
    src = page.locator(f"{which} img").first.get_attribute("src")
    if src.startswith("data:"):
        data = base64.b64decode(src.split(",", 1)[1])
    else:
        data = page.request.get(src).body()
    return Image.open(io.BytesIO(data)).convert("RGB")


def _chance_pixels(img: Image.Image) -> int:
    a = np.asarray(img).astype(int)
    return int((np.abs(a - np.array(CHANCE_RGB)).sum(axis=2) < 40).sum())


def _shown_plot(page) -> str:
    """The Score plot the screen shows (the wide one, or a phone's): the selector of its block."""
    for which in ("#score-plot", "#score-plot-narrow"):
        img = page.locator(f"{which} img")
        if img.count() and img.first.evaluate("i => i.getBoundingClientRect().height > 0 && i.checkVisibility()"):
            return which
    raise AssertionError("no Score plot is shown")


def _plot_has_chance_lines(page) -> None:
    which = _shown_plot(page)
    assert _chance_pixels(_plot_image(page, which)) > 30, f"{which}: no chance line"


def _no_label_over_the_plot(page) -> None:
    which = _shown_plot(page)
    page.locator(f"{which} img").first.scroll_into_view_if_needed(timeout=T)
    over = page.locator(which).evaluate(
        """e => { const i = e.querySelector('img').getBoundingClientRect();
        return [...e.querySelectorAll('label, [data-testid=block-label]')].filter(l => l.checkVisibility()).map(l => {
          const r = l.getBoundingClientRect(); return [l.innerText, r.left < i.right && i.left < r.right && r.top < i.bottom && i.top < r.bottom]; })
          .filter(x => x[1]).map(x => x[0]); }""")
    assert over == [], f"{which}: a label over the plot: {over}"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_score_tab_never_presents_a_copy_and_keeps_the_uploads(app_url, browser, tmp_path, viewport):
    """A refused text file is named, stays listed, and its message does not cover the title; copies only:
    nothing scored, the warning on screen at the top of the answer; copies and new images: only the new ones
    scored (their numbers, their rows, their thumbnails, their plot with chance lines), the copies listed still;
    new images only: no warning box. No empty box in any state. Every check is made; all failures are listed."""
    url, data = app_url
    width, height = viewport
    shots = _shots_dir(tmp_path)
    copies = _uploads(data, tmp_path)  # the Berlin block's own photos (the full-resolution originals when present)
    fresh = _generated(tmp_path, 2, prefix="fresh")  # never flagged by the copy audit
    notes = tmp_path / "notes.png"
    notes.write_text("meeting notes, not a picture\n" * 12, encoding="utf-8")
    soft = Soft()
    check = soft.check
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    expect.set_options(timeout=60_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        _open_tab(page, "Score your images")
        expect(page.locator("#score-button")).to_be_visible()
        check("no empty box before any answer", lambda: _no_empty_box(page, "before any answer"))

        # a text file named .png, alone: named as not an image (not "upload at least 2"); it stays listed
        _add_files(page, [notes])
        _press_score(page)
        expect(page.locator(".toast-body").first).to_be_visible()  # the error message (first: it fades)
        check("no error message over the title", lambda: _toasts_clear_of_the_title(page))
        page.screenshot(path=str(shots / f"p40_score_refused_{width}x{height}.png"))
        page.locator(".toast-close").first.click()
        status = page.locator("#score-status")
        check("the decode error named", lambda: expect(status).to_contain_text("notes.png is not an image", timeout=T))
        check("not 'upload at least 2'", lambda: expect(status).not_to_contain_text("Upload at least", timeout=T))
        check("the refused upload stays listed",
              lambda: expect(page.locator("#score-files")).to_contain_text("notes", timeout=T))
        check("no empty box after a refusal", lambda: _no_empty_box(page, "after a refusal"))

        # the block's own photos only: nothing is scored, and the warning says so at the top of the answer
        _pick_block(page, BERLIN)
        _clear_files(page)
        _add_files(page, copies)
        _press_score(page)
        warning = page.locator("#score-copy-warning")
        expect(warning).to_contain_text(f"{len(copies)} of {len(copies)} uploaded images are copies")
        check("copies only: not scored", lambda: expect(status).to_contain_text("Not scored:", timeout=T))
        check("copies only: the warning says nothing is scored",
              lambda: expect(warning).to_contain_text("Nothing is scored", timeout=T))
        page.wait_for_timeout(800)  # the page's own scroll to the answer
        check("the warning on screen, at the top of the answer", lambda: _on_screen_top(warning, height))
        page.screenshot(path=str(shots / f"p40_score_copies_only_{width}x{height}.png"))
        check("copies only: no 'In short'",
              lambda: expect(page.locator("#score-table")).not_to_contain_text("In short", timeout=T))
        check("copies only: no score table", lambda: expect(page.locator("#score-table table")).to_have_count(0, timeout=T))
        ranking = page.locator("#score-ranking")
        for f in copies:
            check(f"copies only: {Path(f).name} not ranked",
                  lambda f=f: expect(ranking).not_to_contain_text(Path(f).stem, timeout=T))
        check("copies only: no thumbnails", lambda: expect(page.locator("#score-shown img")).to_have_count(0, timeout=T))
        check("copies only: no plot", lambda: expect(page.locator("#score-plot img")).to_have_count(0, timeout=T))
        check("copies only: no phone plot",
              lambda: expect(page.locator("#score-plot-narrow img")).to_have_count(0, timeout=T))
        expect(page.locator("#score-copy-pairs img")).to_have_count(2 * len(copies))

        # the copies stay listed: two new images added to them; only the new ones are scored
        check("the uploads stay listed after an answer",
              lambda: expect(page.locator("#score-files")).to_contain_text(Path(copies[0]).stem, timeout=T))
        _add_files(page, fresh)
        listed = page.locator("#score-files button[aria-label='Remove this file']").count()
        n = len(copies) + 2
        _press_score(page)
        check("copies and new images: the new ones scored",
              lambda: expect(status).to_contain_text(f"Scored 2 of {n} images", timeout=T))
        check("the warning says the copies are left out",
              lambda: expect(warning).to_contain_text("Left out of every score below", timeout=T))
        table = page.locator("#score-table")
        check("'In short' of the new images", lambda: expect(table).to_contain_text(
            f"In short (of the 2 images that are not copies; {len(copies)} copies left out)", timeout=T))
        check("2 images in the retrieval sentence",
              lambda: expect(table).to_contain_text("of 2 images picked the target block", timeout=T))
        # the numbers are those of the new images alone
        alone = data.score(BERLIN, [Image.open(f).convert("RGB") for f in fresh], [Path(f).name for f in fresh])
        want = f"{alone.row['cos_sim']:.3f}"
        check("CosSim of the new images alone", lambda: expect(
            page.locator("#score-table tbody tr").first.locator("td").nth(1)).to_have_text(want, timeout=T))
        for f in fresh:  # the ranking lists the new images (their names may wrap on a phone)
            expect(ranking).to_contain_text(re.compile(r"\s*".join(map(re.escape, Path(f).name))))
        if listed == n:  # the copies were uploaded with them (else the check above failed already)
            for f in copies:
                check(f"{Path(f).name} not ranked", lambda f=f: expect(ranking).not_to_contain_text(Path(f).stem, timeout=T))
                check(f"{Path(f).name} not in the table",
                      lambda f=f: expect(table).not_to_contain_text(Path(f).stem, timeout=T))
                check(f"{Path(f).name} not among the thumbnails",
                      lambda f=f: expect(page.locator("#score-shown")).not_to_contain_text(Path(f).stem, timeout=T))
            check("two thumbnails", lambda: expect(page.locator("#score-shown img")).to_have_count(2, timeout=T))
        check("the plot's chance lines", lambda: _plot_has_chance_lines(page))
        check("no label over the plot", lambda: _no_label_over_the_plot(page))
        page.screenshot(path=str(shots / f"p40_score_copies_and_new_{width}x{height}.png"))
        page.screenshot(path=str(shots / f"p40_score_copies_and_new_full_{width}x{height}.png"), full_page=True)

        # new images only: no warning, no box
        _clear_files(page)
        _add_files(page, fresh)
        _press_score(page)
        expect(status).to_contain_text("Scored 2 images")
        check("no empty box after a clean answer", lambda: _no_empty_box(page, "after a clean answer"))
        expect(page.locator("#score-copy-pairs")).to_be_hidden()
        check("a clean answer's plot: chance lines", lambda: _plot_has_chance_lines(page))
        check("a clean answer's plot: no label over it", lambda: _no_label_over_the_plot(page))
        page.screenshot(path=str(shots / f"p40_score_clean_full_{width}x{height}.png"), full_page=True)
    finally:
        page.close()
    soft.done()


def _readable(page, selector: str, at_least: int = 1) -> None:
    """Every visible element matched by ``selector`` (at least ``at_least``) reads on the screen as it is."""
    checked, bad = page.evaluate(UNREADABLE_JS, selector)
    assert checked >= at_least and bad == [], f"{selector}: {checked} checked; {bad[:8]}"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_leaderboard_fits_and_ranks_only_ranked_rows(app_url, browser, tmp_path, viewport):
    """At 1280 px the whole table is on screen (no sideways scroll inside it), in both views; a row with copied
    panels has no rank in "#". At 390 px every score and mark of every row is within the screen's width (one card
    per row), and the copied rows say "not ranked"."""
    from geofidelity_bench.caveats import COPIED_MARK, REPEATS_MARK

    url, data = app_url
    width, height = viewport
    shots = _shots_dir(tmp_path)
    soft = Soft()
    check = soft.check
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        _open_tab(page, "Leaderboard")
        if width > 700:
            for view in ("mean per method and condition", "one row per block"):
                page.get_by_label(view).check()
                table = page.locator("#lb-table")
                expect(table).to_contain_text(COPIED_MARK)
                page.wait_for_timeout(500)
                table.scroll_into_view_if_needed()

                def fits(view=view):
                    sizes = table.evaluate("e => { const v = e.querySelector('.virtual-table-viewport');"
                                           " return [v.scrollWidth, v.clientWidth, e.getBoundingClientRect().right]; }")
                    assert sizes[0] <= sizes[1] + 1 and sizes[2] <= width, (view, sizes)

                check(f"{view}: the whole table on screen", fits)
                page.screenshot(path=str(shots / f"p40_leaderboard_{view.split()[0]}_{width}x{height}.png"))
                cells = page.locator("#lb-table [role=row].virtual-row").evaluate_all(
                    "rows => rows.map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))")
                headers = page.locator("#lb-table th").evaluate_all("hs => hs.map(h => h.innerText.trim())")
                notes = headers.index("notes")
                ranked = [c for c in cells if COPIED_MARK not in c[notes]]
                copied = [c for c in cells if COPIED_MARK in c[notes]]
                assert copied and ranked, cells

                def ranks(view=view, ranked=ranked, copied=copied):
                    assert all(c[0] == "" for c in copied), [c[:5] for c in copied]
                    assert all(c[0].isdigit() for c in ranked), [c[:5] for c in ranked]
                    if view.startswith("mean"):
                        assert [int(c[0]) for c in ranked] == list(range(1, len(ranked) + 1))

                check(f"{view}: a rank for the ranked rows only", ranks)
        else:
            # the tab's cards render after it opens (Gradio draws a tab's content when it is first shown): wait for
            # them as a reader does, up to the page's timeout, before reading them
            page.locator("#lb-cards .gfb-card").first.wait_for(state="visible")
            check("every score and mark within the screen", lambda: _readable(
                page, "#lb-cards dd, #lb-cards .gfb-card-notes, #lb-table [role=gridcell]", at_least=5 * 10))
            cards = page.locator("#lb-cards .gfb-card")

            def unranked():
                assert cards.count() == 5, cards.count()
                for card in cards.all():
                    text = card.inner_text()
                    if COPIED_MARK in text:
                        assert "not ranked" in text and "#" not in text.split("\n")[0], text
                    else:
                        assert text.startswith("#"), text

            check("the copied rows say 'not ranked', the others their rank", unranked)
            check("the repeated-photos mark", lambda: expect(page.locator("#lb-cards")).to_contain_text(REPEATS_MARK,
                                                                                                    timeout=T))
            page.locator("#lb-cards:visible, #lb-table:visible").first.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"p40_leaderboard_cards_{width}x{height}.png"))
    finally:
        page.close()
    soft.done()


def test_every_key_table_reads_on_a_phone(app_url, browser, tmp_path):
    """390x844: Explore's pickers show their values whole; its block table and anchors table (CosSim, the
    repeated-photos mark, chance) and About's tables and citation lie within the screen, none scrolling sideways."""
    from geofidelity_bench.caveats import REPEATS_MARK

    url, data = app_url
    shots = _shots_dir(tmp_path)
    soft = Soft()
    check = soft.check
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    try:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Explore").wait_for()
        city = page.locator("input[aria-label='City']")
        city.click()
        page.get_by_role("option", name="Berlin").first.click()
        block = page.locator("input[aria-label='Block']")
        expect(block).to_have_value(re.compile("^" + BERLIN))
        meta = page.locator("#explore-meta")
        expect(meta).to_contain_text(BERLIN)
        for name, picker in (("City", city), ("Block", block)):  # the whole value is shown, not cut

            def whole(picker=picker):
                fits = picker.evaluate("e => [e.scrollWidth, e.clientWidth, e.value]")
                assert fits[0] <= fits[1] + 1, fits

            check(f"Explore's {name} value whole", whole)
        assert BERLIN in data.thin_anchor_blocks()
        expect(meta).to_contain_text(f"heldout_real {REPEATS_MARK}")
        expect(meta).to_contain_text("by chance here")
        check("Explore's block and anchors tables within the screen",
              lambda: _readable(page, "#explore-meta td, #explore-meta p", at_least=10 + 3 * 6))
        meta.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "p40_explore_tables_390x844.png"))
        page.screenshot(path=str(shots / "p40_explore_390x844.png"), full_page=True)

        _open_tab(page, "About")
        about = page.locator("#about")
        expect(about).to_contain_text("Citation")
        check("About's tables within the screen", lambda: _readable(page, "#about td", at_least=4 * 8))
        pre = about.locator("pre").first
        expect(pre).to_contain_text("@article")
        check("the citation within the screen", lambda: _readable(page, "#about pre"))
        page.screenshot(path=str(shots / "p40_about_390x844.png"), full_page=True)
    finally:
        page.close()
    soft.done()
