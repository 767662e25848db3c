"""The fake Hub's commit dates, through huggingface_hub's own parsers (real HTTP on loopback).

Code that asks the Hub when a file last changed (list_repo_tree / get_paths_info with
expand=True, list_repo_commits, repo_info's lastModified) is only as well tested as the fake
answers; these tests hold the fake to the shapes HfApi parses.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

try:
    from fake_hub import FakeHub
except ImportError:  # tests/ imported as a package
    from tests.fake_hub import FakeHub

TOKEN = "hf_FakeSecretToken0123456789abcdef"
REPO = "tester/dated"
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class StepClock:
    """A clock that answers a fixed list of times, one per commit, then repeats the last."""

    def __init__(self, times: list[datetime]):
        self.times = list(times)
        self.calls = 0

    def __call__(self) -> datetime:
        self.calls += 1
        return self.times[min(self.calls, len(self.times)) - 1]


@pytest.fixture
def online(monkeypatch):
    """The suite runs with HF_HUB_OFFLINE=1; the fake Hub is on loopback, so allow requests."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def commit(api, files: dict[str, bytes], title: str) -> str:
    from huggingface_hub import CommitOperationAdd

    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=data) for p, data in files.items()]
    info = api.create_commit(REPO, ops, commit_message=title, repo_type="dataset", commit_description=f"about {title}")
    return info.oid


def three_commits(clock_times: list[datetime]):
    """A dataset repo with: creation, c1 (a, b, data/x), c2 (changes b, re-uploads a unchanged),
    c3 (adds data/y). Returns (hub, api, [oid_c1, oid_c2, oid_c3]); the caller stops the hub."""
    from huggingface_hub import HfApi

    hub = FakeHub(token=TOKEN, clock=StepClock(clock_times)).start()
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo(REPO, repo_type="dataset")
    oids = [
        commit(api, {"a.txt": b"a1", "b.txt": b"b1", "data/x.bin": b"x1"}, "first"),
        # a.txt is sent again with the same bytes: not a change, so it keeps the first date.
        commit(api, {"a.txt": b"a1", "b.txt": b"b2"}, "second"),
        commit(api, {"data/y.bin": b"y1"}, "third"),
    ]
    return hub, api, oids


TIMES = [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2), T0 + timedelta(hours=3)]


def test_tree_and_paths_info_give_each_file_the_date_of_its_last_change(online):
    hub, api, (c1, c2, c3) = three_commits(TIMES)
    try:
        d1, d2, d3 = TIMES[1:]
        expected = {"a.txt": (c1, "first", d1), "b.txt": (c2, "second", d2),
                    "data/x.bin": (c1, "first", d1), "data/y.bin": (c3, "third", d3)}

        tree = {e.path: e for e in api.list_repo_tree(REPO, repo_type="dataset", recursive=True, expand=True)}
        infos = {e.path: e for e in api.get_paths_info(
            REPO, ["a.txt", "b.txt", "data/x.bin", "data/y.bin", "missing.txt", "data"], repo_type="dataset", expand=True
        )}
        assert "missing.txt" not in infos  # a path that is not there is left out, no error
        for listing in (tree, infos):
            for path, (oid, title, date) in expected.items():
                last = listing[path].last_commit
                assert (last.oid, last.title, last.date) == (oid, title, date), path
            # A folder's last commit is the newest one that touched anything under it.
            assert listing["data"].last_commit.oid == c3 and not hasattr(listing["data"], "size")
        assert tree[".gitattributes"].last_commit.date == TIMES[0]  # the repo's creation commit

        # Without expand there is no lastCommit (as on the Hub: it costs the server).
        assert all(e.last_commit is None for e in api.list_repo_tree(REPO, repo_type="dataset", recursive=True))
        assert all(e.last_commit is None for e in api.get_paths_info(REPO, ["a.txt", "data"], repo_type="dataset"))

        # Up to an older revision (a full 40-hex id): b.txt still has its first date, y does not exist.
        old = {e.path: e for e in api.list_repo_tree(REPO, revision=c1, repo_type="dataset", recursive=True, expand=True)}
        assert old["b.txt"].last_commit.oid == c1 and "data/y.bin" not in old
        old_info = api.get_paths_info(REPO, ["b.txt", "data/y.bin"], revision=c1, repo_type="dataset", expand=True)
        assert [(e.path, e.last_commit.date) for e in old_info] == [("b.txt", d1)]
    finally:
        hub.stop()


def test_commits_newest_first_and_last_modified_is_the_head_date(online):
    hub, api, (c1, c2, c3) = three_commits(TIMES)
    try:
        commits = api.list_repo_commits(REPO, repo_type="dataset")
        assert [c.commit_id for c in commits[:3]] == [c3, c2, c1]
        assert [c.created_at for c in commits] == TIMES[::-1]
        assert [c.title for c in commits] == ["third", "second", "first", "initial commit"]
        assert commits[0].message == "about third" and commits[0].authors == [hub.user]
        assert commits[-1].authors == ["system"]
        # From an older revision the history stops there.
        assert [c.commit_id for c in api.list_repo_commits(REPO, repo_type="dataset", revision=c2)][:2] == [c2, c1]

        info = api.dataset_info(REPO)
        assert info.sha == c3 and info.last_modified == TIMES[3] and info.created_at == TIMES[0]
        assert api.dataset_info(REPO, revision=c1).last_modified == TIMES[1]  # /revision/{40-hex}
        assert [c.date for c in hub.commits("dataset", REPO)] == TIMES
    finally:
        hub.stop()


def test_a_clock_going_backwards_still_gives_strictly_increasing_dates(online):
    # Creation at T0, then the clock goes back an hour, stands still, and jumps ahead.
    backwards = [T0, T0 - timedelta(hours=1), T0 - timedelta(hours=1), T0 + timedelta(days=1)]
    hub, api, (c1, c2, c3) = three_commits(backwards)
    try:
        dates = [c.created_at for c in api.list_repo_commits(REPO, repo_type="dataset")][::-1]
        step = timedelta(microseconds=1)  # the documented nudge, kept exactly through the JSON
        assert dates == [T0, T0 + step, T0 + 2 * step, T0 + timedelta(days=1)]
        assert all(a < b for a, b in zip(dates, dates[1:]))
        tree = {e.path: e for e in api.list_repo_tree(REPO, repo_type="dataset", recursive=True, expand=True)}
        assert tree["b.txt"].last_commit.date == T0 + 2 * step and tree["a.txt"].last_commit.date == T0 + step
    finally:
        hub.stop()


def test_pages_of_commits_are_followed_and_the_default_clock_is_increasing(online):
    from huggingface_hub import HfApi

    with FakeHub(token=TOKEN) as hub:
        before = datetime.now(timezone.utc)
        for i in range(60):  # more than one page of 50
            hub.add_files("dataset", REPO, {"n.txt": str(i).encode()}, message=f"seed {i}")
        api = HfApi(endpoint=hub.url, token=TOKEN)
        commits = api.list_repo_commits(REPO, repo_type="dataset")
        assert len(commits) == 61 and hub.count("GET", r"/commits/") == 2
        assert commits[0].title == "seed 59" and commits[-1].title == "initial commit"
        dates = [c.created_at for c in commits][::-1]
        assert all(a < b for a, b in zip(dates, dates[1:])) and dates[0] >= before - timedelta(seconds=1)
        assert hub.commit_count("dataset", REPO) == 60
