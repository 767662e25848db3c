"""The living leaderboard in a real headless Chromium: two runs pushed with ``push-results`` to the
loopback fake Hub appear side by side in the Space's "Hub leaderboard" tab; a third, scored with
another encoder, is not ranked with them and is named as another group; Refresh picks up a new push."""

from __future__ import annotations

import socket

import pytest

try:  # the fake Hub (`hub`, `online`), results folders, and the browser of the app's browser test
    from test_app_browser import browser, pytestmark  # noqa: F401
    from test_generation_hub import hub, online  # noqa: F401
    from test_leaderboard_hub import REPO, make_results
except ImportError:  # tests/ imported as a package
    from tests.test_app_browser import browser, pytestmark  # noqa: F401
    from tests.test_generation_hub import hub, online  # noqa: F401
    from tests.test_leaderboard_hub import REPO, make_results

sync_api = pytest.importorskip("playwright.sync_api")


def _push_results(folder, hub) -> None:
    from geofidelity_bench.cli import main

    assert main(["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url]) == 0


def test_space_shows_comparable_submissions_and_names_the_other_group(hub, online, browser, tmp_path):
    from geofidelity_bench.demo_app import HubBoard, build_app, launch, load_app_data

    _push_results(make_results(tmp_path / "r1", seed=1, method="gen_a"), hub)
    _push_results(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
    _push_results(make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip-vit-b32", enc_hash="c" * 64),
                  hub)

    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(tmp_path / "cache"))
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
