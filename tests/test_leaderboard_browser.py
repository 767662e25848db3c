"""The living leaderboard in a real headless Chromium: two runs pushed with ``push-results`` to the
loopback fake Hub appear side by side in the Space's "Hub leaderboard" tab; a third, scored with
another encoder, is not ranked with them and is named as another group; Refresh picks up a new push."""

from __future__ import annotations

import socket

import pytest

try:  # the fake Hub (`hub`, `online`), results folders, and the browser of the app's browser test
    from leaderboard_helpers import init_demo, pin_from_results
    from test_app_browser import OVERFLOW_JS, browser, pytestmark  # noqa: F401
    from test_app_phone import UNREADABLE_JS
    from test_generation_hub import hub, online  # noqa: F401
    from test_leaderboard_hub import REPO, demo_runs, make_results  # noqa: F401
    from test_app import shared_app_data
except ImportError:  # tests/ imported as a package
    from tests.leaderboard_helpers import init_demo, pin_from_results
    from tests.test_app_browser import OVERFLOW_JS, browser, pytestmark  # noqa: F401
    from tests.test_app_phone import UNREADABLE_JS
    from tests.test_generation_hub import hub, online  # noqa: F401
    from tests.test_leaderboard_hub import REPO, demo_runs, make_results  # noqa: F401
    from tests.test_app import shared_app_data

sync_api = pytest.importorskip("playwright.sync_api")


#: The Hub tab's text, a table's rows as lines of tab-separated cells whatever the layout (a phone: cards).
BOARD_TEXT_JS = """e => { const out = [];
  const walk = n => { for (const c of n.children) {
    if (c.tagName === 'TABLE') { for (const r of c.rows) out.push([...r.cells].map(x => x.innerText.trim()).join('\\t')); }
    else if (c.querySelector('table')) walk(c);
    else out.push(c.innerText); } };
  walk(e); return out.join('\\n'); }"""


def _push_results(folder, hub) -> None:
    from geofidelity_bench.cli import main

    assert main(["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url]) == 0


def test_space_shows_comparable_submissions_and_names_the_other_group(hub, online, browser, tmp_path, tmp_path_factory):
    from geofidelity_bench.demo_app import HubBoard, build_app, launch

    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a")
    r3 = make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip-vit-b32", enc_hash="c" * 64)
    pin_from_results(hub, REPO, r1)  # the maintainer's pins: the default group first, then another encoder's
    pin_from_results(hub, REPO, r3)
    _push_results(r1, hub)
    _push_results(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
    _push_results(r3, hub)

    _push_results(make_results(tmp_path / "r5", seed=5, method="gen_part", blocks=[("b0", "rome")]), hub)
    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    data = shared_app_data(tmp_path_factory)  # the app's data, built once per session
    demo = build_app(data, board)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    sync_api.expect.set_options(timeout=30_000)
    try:
        page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
        page.get_by_role("tab", name="Hub leaderboard").click()
        board_text = page.locator("#hub-board")
        sync_api.expect(board_text).to_contain_text("gen_a")
        text = board_text.inner_text()
        assert "gen_b" in text, text
        assert "gen_c" not in text.split("other group")[0], "another encoder's run must not be ranked here"
        page_text = page.locator("body").inner_text()
        assert "1 submission(s) in 1 other group(s)" in page_text and "encoder config" in page_text
        assert "Ranked: 2 generator submission(s), each covering all 6 block(s)" in page_text
        ranking, apart = text.split("Listed apart (not ranked)")
        assert "gen_part" not in ranking and "gen_part" in apart and "covers 1 of the group's 6 block(s)" in apart
        page.screenshot(path=str(tmp_path / "hub_leaderboard.png"), full_page=True)

        # a new comparable run appears after Refresh, without restarting the Space
        _push_results(make_results(tmp_path / "r4", seed=4, method="gen_d"), hub)
        page.locator("#hub-refresh").click()
        sync_api.expect(board_text).to_contain_text("gen_d")

        page.get_by_role("tab", name="Submit").click()
        sync_api.expect(page.locator("#submit-text")).to_contain_text("push-results")
    finally:
        page.close()
        demo.close()


def test_hub_tab_after_the_demo_and_a_one_block_run(hub, online, browser, demo_runs, warm_demo_cache, tmp_path,
                                                    tmp_path_factory):
    """The Hub tab with the demo pushed three times and a 1-block tiny run: one set of anchors, no
    sanity rows, the tiny run listed apart as partial, right counts; screenshots at two sizes."""
    import os

    import pandas as pd

    from geofidelity_bench.demo_app import HubBoard, build_app, launch

    init_demo(hub, REPO, warm_demo_cache)  # the maintainer pins the demo's group
    for _ in range(3):
        _push_results(demo_runs / "demo", hub)
    _push_results(demo_runs / "tiny", hub)
    # the pinned L0 has the demo's 7 blocks, L1 the one block whose L1 prompt the demo can build: the 1-block run
    # is ranked in L1 (it covers it) and listed apart, partial, in L0
    raw = pd.read_csv(demo_runs / "tiny" / "results.csv")
    tiny = raw[raw["method"] == "tiny"].set_index("condition")["cos_sim"]
    cos = {c: f"{tiny[c]:.3f}" for c in ("L0", "L1")}
    assert cos["L0"] != cos["L1"]
    board = HubBoard(REPO, endpoint=hub.url).refresh()  # the one bootstrap setting: 5,000 resamples, seed 42
    data = shared_app_data(tmp_path_factory)  # the app's data, built once per session
    demo = build_app(data, board)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    shots = os.environ.get("GEOFIDELITY_SCREENSHOTS") or str(tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    try:
        page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
        page.locator("[role=tablist]").first.wait_for()
        for width, height in ((1280, 900), (390, 844)):  # one page, resized: the layout follows the width
            page.set_viewport_size({"width": width, "height": height})
            tab = page.get_by_role("tab", name="Hub leaderboard")
            sync_api.expect(tab).to_be_visible()  # one tap away at both widths (the tab bar wraps)
            box = tab.bounding_box()
            assert box["x"] + box["width"] <= width, (width, box)
            tab.click()
            board_text = page.locator("#hub-board")
            sync_api.expect(board_text).to_contain_text("Listed apart")
            text = board_text.evaluate(BOARD_TEXT_JS)  # a phone shows the tables as cards: read them row by row
            ranking, apart = text.split("Listed apart (not ranked)")
            assert "1 partial, 0 not comparable, 0 copied" in text
            assert "3 method(s) on 7 block(s)" in text and "5,000 bootstrap resamples, seed 42" in text
            assert "Sanity" not in ranking
            tiny_ranked = [line for line in ranking.splitlines() if line.startswith("tiny") and "\t" in line]  # rows
            assert tiny_ranked and all(cos["L1"] in line and cos["L0"] not in line for line in tiny_ranked)
            assert "tiny" in apart and "covers 1 of the group's 7 block(s)" in apart and cos["L0"] in apart
            assert len([line for line in ranking.splitlines() if line.startswith("Held-out Real")]) == 1
            if width < 700:  # a phone: every cell of every table (Table 10's numbers and marks) within the screen
                checked, bad = page.evaluate(UNREADABLE_JS, "#hub-board td")
                assert checked >= 20 and bad == [], (checked, bad[:8])
                marks = page.locator("#hub-board td", has_text="partial")
                assert marks.count() and all(m.is_visible() for m in marks.all())
            # the group's plots, which the text refers to (whiskers, leaderboard.png), at their own aspect ratio
            plots = page.locator("#hub-plots img")
            sync_api.expect(page.locator("#hub-plots")).to_contain_text("Leaderboard with real-image anchors")
            assert plots.count() >= 1
            page.locator("#hub-plots").scroll_into_view_if_needed()  # the plots load lazily, once on screen
            page.wait_for_function("() => [...document.querySelectorAll('#hub-plots img')]"
                                   ".every(i => i.complete && i.naturalWidth > 0)")
            for img in plots.all():
                nw, nh, w, h = img.evaluate("i => [i.naturalWidth, i.naturalHeight, "
                                            "i.getBoundingClientRect().width, i.getBoundingClientRect().height]")
                assert abs(w / h - nw / nh) < 0.02 * nw / nh and w <= nw + 1, (width, nw, nh, w, h)
            page.evaluate("() => window.scrollTo(0, 0)")
            assert page.evaluate(OVERFLOW_JS) == [], width
            page.screenshot(path=f"{shots}/hub_tab_{width}x{height}.png", full_page=True)
            page.get_by_role("tab", name="Submit").click()
            submit = page.locator("#submit-text")
            sync_api.expect(submit).to_contain_text('Press "Refresh" on the Hub leaderboard tab of this app')
            assert page.evaluate(OVERFLOW_JS) == [], width
            page.screenshot(path=f"{shots}/submit_tab_{width}x{height}.png", full_page=True)
    finally:
        page.close()
        demo.close()
