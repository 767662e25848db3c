"""A loopback fake of the Hugging Face Hub HTTP API, for tests (no network, no dependencies).

huggingface_hub 2.x talks HTTP through httpx, so request mocks do not apply; this is a real
threaded ``http.server`` on 127.0.0.1 with the endpoints ``HfApi`` uses to create repos,
commit files, read repo info and download files:

* ``POST /api/repos/create``                                    create_repo
* ``GET  /api/{type}s/{repo}`` and ``/revision/{rev}``          repo_info / dataset_info (``?blobs=true``)
* ``GET  /api/{type}s/{repo}/tree/{rev}[/{path}]``              list_repo_tree / list_repo_files (``?expand=true``: ``lastCommit``)
* ``POST /api/{type}s/{repo}/paths-info/{rev}``                 get_paths_info (form or JSON body; ``expand``: ``lastCommit``)
* ``GET  /api/{type}s/{repo}/commits/{rev}``                    list_repo_commits (newest first, 50 a page, ``?p=``)
* ``POST /api/{type}s/{repo}/preupload/{rev}``                  upload modes (always "regular")
* ``POST /api/{type}s/{repo}/commit/{rev}``                     NDJSON commit (file, deletedFile, deletedFolder)
* ``POST /api/validate-yaml``                                   README metadata check
* ``HEAD/GET /{type-prefix}{repo}/resolve/{rev}/{path}``         hf_hub_download
* ``GET  /api/whoami-v2``

Files live in memory per repo, with one snapshot per commit (so old revisions resolve). Every
commit has a date from ``clock`` (default: the real UTC time), kept strictly increasing: a clock
that returns a time at or before the previous commit's (a coarse clock, a test's clock going
backwards) gives the previous date plus one microsecond. Dates are written in the Hub's form
with six fraction digits where the Hub writes three, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, so that
microsecond survives ``huggingface_hub``'s ``parse_datetime`` (which reads up to six). A file's ``lastCommit`` is the newest commit, up to the
revision asked, that added it or changed its bytes; a folder's is the newest commit that added,
changed or deleted anything under it.
``fail_next(...)`` injects HTTP errors; ``requests`` records (method, path, status), never
headers, so a test can check which calls were made without the token ever being stored.

Usage::

    with FakeHub(token="hf_test") as hub:
        api = HfApi(endpoint=hub.url, token="hf_test")
        ...
        hub.files("dataset", "user/repo")  # {path: bytes}
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


def unreachable_url() -> str:
    """A loopback URL with nothing listening (a port the OS just handed out and took back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_date(moment: datetime) -> str:
    """A UTC datetime as the Hub's JSON writes it (with microseconds: see the module docstring)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Commit:
    oid: str
    date: datetime  # UTC, aware
    title: str  # the NDJSON header's summary
    snapshot: dict[str, bytes]
    message: str = ""  # the header's description
    author: str = "system"

    def json_ref(self) -> dict[str, str]:
        """The ``lastCommit`` object of a tree or paths-info entry (hf_api.RepoFile reads these keys)."""
        return {"id": self.oid, "title": self.title, "date": hub_date(self.date)}


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool = False
    commits: list[_Commit] = field(default_factory=list)  # oldest first

    @property
    def head(self) -> _Commit:
        return self.commits[-1]

    def index(self, revision: str) -> int | None:
        """The position in ``commits`` of a branch name, a full commit id or a prefix of 7+ hex."""
        if revision in ("main", "refs/heads/main"):
            return len(self.commits) - 1
        for i, commit in enumerate(self.commits):
            if commit.oid == revision or (len(revision) >= 7 and commit.oid.startswith(revision)):
                return i
        return None

    def snapshot(self, revision: str) -> _Commit | None:
        i = self.index(revision)
        return None if i is None else self.commits[i]

    def changes(self, upto: int) -> tuple[dict[str, _Commit], list[tuple[_Commit, set[str]]]]:
        """Up to commit ``upto``: each present file's last adding or changing commit, and every
        commit with the set of paths it added, changed or deleted (for folders)."""
        last: dict[str, _Commit] = {}
        touched: list[tuple[_Commit, set[str]]] = []
        before: dict[str, bytes] = {}
        for commit in self.commits[: upto + 1]:
            now = commit.snapshot
            changed = {path for path, data in now.items() if before.get(path) != data}
            for path in changed:
                last[path] = commit
            touched.append((commit, changed | (before.keys() - now.keys())))
            before = now
        return {path: last[path] for path in before}, touched


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern
    status: int
    remaining: int


class FakeHub:
    """The server; use as a context manager (or call ``start``/``stop``)."""

    def __init__(
        self,
        token: str | None = None,
        user: str = "tester",
        port: int = 0,
        clock: Callable[[], datetime] | None = None,
    ):
        self.token = token
        # Commit dates come from here (a test injects one); naive datetimes are taken as UTC.
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.port = port  # 0: any free port (tests); a fixed one for `python tests/fake_hub.py`
        self.user = user
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.authorized_writes = 0
        self._failures: list[_Failure] = []
        self._lock = threading.RLock()
        self._counter = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- test helpers ---------------------------------------------------------------------
    def fail_next(self, method: str, path_regex: str, status: int = 500, count: int = 1) -> None:
        """The next ``count`` requests matching (method, path regex) answer ``status``."""
        with self._lock:
            self._failures.append(_Failure(method.upper(), re.compile(path_regex), status, count))

    def files(self, repo_type: str, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        with self._lock:
            snap = self.repos[(repo_type, repo_id)].snapshot(revision)
            assert snap is not None
            return dict(snap.snapshot)

    def commits(self, repo_type: str, repo_id: str) -> list[_Commit]:
        """Every commit of a repo, oldest first (the repo's creation commit included)."""
        with self._lock:
            return list(self.repos[(repo_type, repo_id)].commits)

    def commit_count(self, repo_type: str, repo_id: str) -> int:
        with self._lock:
            return len(self.repos[(repo_type, repo_id)].commits) - 1

    def count(self, method: str, path_regex: str, status: int | None = None) -> int:
        rx = re.compile(path_regex)
        with self._lock:
            return sum(
                1 for m, p, s in self.requests if m == method.upper() and rx.search(p) and (status is None or s == status)
            )

    def add_files(self, repo_type: str, repo_id: str, files: dict[str, bytes], message: str = "seed") -> str:
        """Creates the repo if needed and commits ``files`` directly (test setup)."""
        with self._lock:
            repo = self._ensure(repo_type, repo_id)
            snap = dict(repo.head.snapshot)
            snap.update(files)
            return self._commit(repo, snap, title=message, author=self.user)

    # -- internals ------------------------------------------------------------------------
    def _ensure(self, repo_type: str, repo_id: str, private: bool = False) -> _Repo:
        key = (repo_type, repo_id)
        if key not in self.repos:
            repo = _Repo(repo_type, repo_id, private)
            # As on the Hub, a new repo starts with a system commit holding .gitattributes.
            self._commit(repo, {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"}, title="initial commit")
            self.repos[key] = repo
        return self.repos[key]

    def _new_oid(self) -> str:
        self._counter += 1
        return hashlib.sha1(f"commit-{self._counter}".encode()).hexdigest()

    def _next_date(self, repo: _Repo) -> datetime:
        moment = self.clock()
        moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
        if repo.commits and moment <= repo.head.date:
            # Strictly increasing, so "newest first" is one order however the clock behaves.
            moment = repo.head.date + timedelta(microseconds=1)
        return moment

    def _commit(
        self, repo: _Repo, snapshot: dict[str, bytes], title: str = "", message: str = "", author: str = "system"
    ) -> str:
        commit = _Commit(self._new_oid(), self._next_date(repo), title, snapshot, message, author)
        repo.commits.append(commit)
        return commit.oid

    def _take_failure(self, method: str, path: str) -> int | None:
        with self._lock:
            for f in self._failures:
                if f.remaining > 0 and f.method == method and f.pattern.search(path):
                    f.remaining -= 1
                    return f.status
        return None


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr logging
        return

    # -- plumbing -------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _send(self, status: int, payload: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None):
        body = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        self.send_response(status)
        if raw is None:
            self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.hub.requests.append((self.command, self._path, status))

    def _error(self, status: int, message: str, code: str | None = None):
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, {"error": message}, headers)

    def _authorized(self) -> bool:
        if self.hub.token is None:
            return True
        return self.headers.get("Authorization") == f"Bearer {self.hub.token}"

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        self._path = unquote(split.path)
        self._query = parse_qs(split.query)
        self._payload = self._body() if self.command in ("POST", "PUT") else b""
        status = self.hub._take_failure(self.command, self._path)
        if status is not None:
            return self._error(status, f"injected failure {status}")
        try:
            self._route()
        except Exception as err:  # noqa: BLE001 - a bug in the fake must show up as a 500
            self._error(500, f"fake hub error: {type(err).__name__}: {err}")

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _dispatch

    # -- routes ---------------------------------------------------------------------------
    def _route(self) -> None:
        p, m = self._path, self.command
        if p == "/api/whoami-v2" and m == "GET":
            if not self.headers.get("Authorization") or not self._authorized():
                return self._error(401, "Invalid credentials")
            return self._send(200, {"type": "user", "name": self.hub.user, "auth": {"accessToken": {"role": "write"}}})
        if p == "/api/validate-yaml" and m == "POST":
            return self._send(200, {"errors": [], "warnings": []})
        if p == "/api/repos/create" and m == "POST":
            return self._create_repo()
        match = re.fullmatch(r"/api/(models|datasets|spaces)/([^/]+/[^/]+)(/.*)?", p)
        if match:
            repo_type, repo_id, rest = _TYPES[match.group(1)], match.group(2), match.group(3) or ""
            return self._api_repo(m, repo_type, repo_id, rest)
        match = re.fullmatch(r"/(datasets/|spaces/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", p)
        if match and m in ("GET", "HEAD"):
            repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(match.group(1) or "", "model")
            return self._resolve(repo_type, match.group(2), match.group(3), match.group(4))
        return self._error(404, f"no route for {m} {p}")

    def _create_repo(self) -> None:
        if not self._authorized():
            return self._error(401, "Invalid credentials in Authorization header")
        body = json.loads(self._payload or b"{}")
        repo_type = body.get("type") or "model"
        name, org = body["name"], body.get("organization") or self.hub.user
        repo_id = f"{org}/{name}"
        prefix = {"dataset": "datasets/", "space": "spaces/"}.get(repo_type, "")
        url = f"{self.hub.url}/{prefix}{repo_id}"
        with self.hub._lock:
            self.hub.authorized_writes += 1
            if (repo_type, repo_id) in self.hub.repos:
                # The Hub answers 409 with the repo's url; create_repo(exist_ok=True) reads it.
                message = "You already created this repo"
                return self._send(409, {"error": message, "url": url}, {"X-Error-Message": message})
            self.hub._ensure(repo_type, repo_id, body.get("visibility") == "private" or bool(body.get("private")))
        return self._send(200, {"url": url, "name": repo_id})

    def _repo(self, repo_type: str, repo_id: str) -> _Repo | None:
        return self.hub.repos.get((repo_type, repo_id))

    def _api_repo(self, method: str, repo_type: str, repo_id: str, rest: str) -> None:
        with self.hub._lock:
            repo = self._repo(repo_type, repo_id)
        if repo is None:
            return self._error(404, f"Repository {repo_id} not found", "RepoNotFound")
        if repo.private and not self._authorized():
            return self._error(401, "Repository not found", "RepoNotFound")
        if method == "GET" and (rest == "" or rest.startswith("/revision/")):
            revision = unquote(rest[len("/revision/") :]) if rest else "main"
            return self._info(repo, revision)
        match = re.fullmatch(r"/tree/([^/]+)(/.*)?", rest)
        if method == "GET" and match:
            return self._tree(repo, unquote(match.group(1)), (match.group(2) or "").strip("/"))
        match = re.fullmatch(r"/paths-info/([^/]+)", rest)
        if method == "POST" and match:
            return self._paths_info(repo, unquote(match.group(1)))
        match = re.fullmatch(r"/commits/([^/]+)", rest)
        if method == "GET" and match:
            return self._commits(repo, unquote(match.group(1)))
        match = re.fullmatch(r"/preupload/([^/]+)", rest)
        if method == "POST" and match:
            return self._preupload(repo, unquote(match.group(1)))
        match = re.fullmatch(r"/commit/([^/]+)", rest)
        if method == "POST" and match:
            return self._commit(repo, unquote(match.group(1)))
        return self._error(404, f"no route for {method} {self._path}")

    def _info(self, repo: _Repo, revision: str) -> None:
        with self.hub._lock:
            snap = repo.snapshot(revision)
        if snap is None:
            return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
        oid, files = snap.oid, snap.snapshot
        blobs = self._query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path in sorted(files):
            entry: dict[str, Any] = {"rfilename": path}
            if blobs:
                entry.update(size=len(files[path]), blobId=git_blob_sha1(files[path]))
            siblings.append(entry)
        return self._send(
            200,
            {
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": oid,
                "private": repo.private,
                "disabled": False,
                "gated": False,
                "siblings": siblings,
                "tags": [],
                "lastModified": hub_date(snap.date),
                "createdAt": hub_date(repo.commits[0].date),
            },
        )

    @staticmethod
    def _flag(value: Any) -> bool:
        """A boolean query or form value as httpx writes it ("true"/"false"), or a JSON bool."""
        return value is True or str(value).lower() in ("1", "true")

    def _entries_at(self, repo: _Repo, revision: str) -> tuple[dict[str, bytes], Callable[[str, bool], dict]] | None:
        """The files at ``revision`` and a maker of tree entries (with ``lastCommit`` when
        the request asked for ``expand``), or None for an unknown revision."""
        with self.hub._lock:
            upto = repo.index(revision)
            if upto is None:
                return None
            files = repo.commits[upto].snapshot
            last, touched = repo.changes(upto)

        def entry(path: str, is_file: bool, expand: bool) -> dict[str, Any]:
            if is_file:
                out = {"type": "file", "path": path, "size": len(files[path]), "oid": git_blob_sha1(files[path])}
                commit = last[path]
            else:
                out = {"type": "directory", "path": path, "oid": git_blob_sha1(path.encode())}
                inside = path + "/"
                commit = next(c for c, paths in reversed(touched) if any(p.startswith(inside) for p in paths))
            if expand:
                out["lastCommit"] = commit.json_ref()
            return out

        return files, entry

    def _tree(self, repo: _Repo, revision: str, folder: str) -> None:
        found = self._entries_at(repo, revision)
        if found is None:
            return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
        files, make = found
        recursive = self._flag(self._query.get("recursive", ["false"])[0])
        expand = self._flag(self._query.get("expand", ["false"])[0])
        prefix = f"{folder}/" if folder else ""
        entries: dict[str, dict[str, Any]] = {}
        for path in sorted(files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                sub = prefix + "/".join(parts[:depth])
                if (recursive or depth == 1) and sub not in entries:
                    entries[sub] = make(sub, False, expand)
            if recursive or len(parts) == 1:
                entries[path] = make(path, True, expand)
        if folder and not entries:
            return self._error(404, f"{folder} not found", "EntryNotFound")
        return self._send(200, list(entries.values()))

    def _paths_info(self, repo: _Repo, revision: str) -> None:
        # huggingface_hub posts a form (paths=a&paths=b&expand=true); a JSON body is read too.
        if "json" in (self.headers.get("Content-Type") or ""):
            body = json.loads(self._payload or b"{}")
            paths, expand = body.get("paths") or [], body.get("expand", False)
            paths = [paths] if isinstance(paths, str) else paths
        else:
            form = parse_qs(self._payload.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), form.get("expand", ["false"])[0]
        found = self._entries_at(repo, revision)
        if found is None:
            return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
        files, make = found
        out, seen = [], set()
        for path in (p.strip("/") for p in paths):
            if path in seen:
                continue
            seen.add(path)
            if path in files:
                out.append(make(path, True, self._flag(expand)))
            elif path and any(f.startswith(path + "/") for f in files):
                out.append(make(path, False, self._flag(expand)))
            # A path that is not there is left out, as on the Hub (get_paths_info documents it).
        return self._send(200, out)

    _COMMITS_PER_PAGE = 50

    def _commits(self, repo: _Repo, revision: str) -> None:
        with self.hub._lock:
            upto = repo.index(revision)
            history = list(reversed(repo.commits[: upto + 1])) if upto is not None else None
        if history is None:
            return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
        try:
            page = int(self._query.get("p", ["0"])[0])
        except ValueError:
            return self._error(400, f"bad page number p={self._query['p'][0]!r}")
        start = page * self._COMMITS_PER_PAGE
        items = [
            {
                "id": c.oid,
                "title": c.title,
                "message": c.message,
                "authors": [{"user": c.author}],
                "date": hub_date(c.date),
            }
            for c in history[start : start + self._COMMITS_PER_PAGE]
        ]
        headers = {}
        if start + self._COMMITS_PER_PAGE < len(history):
            # As on the Hub: the next page in a Link header, which huggingface_hub's paginate follows.
            headers["Link"] = f'<{self.hub.url}{self._path}?p={page + 1}>; rel="next"'
        return self._send(200, items, headers)

    def _preupload(self, repo: _Repo, revision: str) -> None:
        if not self._authorized():
            return self._error(401, "Invalid credentials in Authorization header")
        body = json.loads(self._payload or b"{}")
        with self.hub._lock:
            snap = repo.snapshot(revision)
        files = snap.snapshot if snap else {}
        out = []
        for f in body.get("files", []):
            existing = files.get(f["path"])
            out.append(
                {
                    "path": f["path"],
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    "oid": git_blob_sha1(existing) if existing is not None else None,
                }
            )
        return self._send(200, {"files": out, "commitOid": snap.oid if snap else None})

    def _commit(self, repo: _Repo, revision: str) -> None:
        if not self._authorized():
            return self._error(401, "Invalid credentials in Authorization header")
        lines = [json.loads(line) for line in self._payload.splitlines() if line.strip()]
        header = next((x["value"] for x in lines if x.get("key") == "header"), {})
        with self.hub._lock:
            self.hub.authorized_writes += 1
            snap = repo.snapshot(revision)
            if snap is None:
                return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
            parent = header.get("parentCommit")
            if parent and parent != snap.oid:
                return self._error(412, "A commit has happened since. Please refresh and try again.")
            files = dict(snap.snapshot)
            for item in lines:
                key, value = item.get("key"), item.get("value") or {}
                if key == "file":
                    if value.get("encoding") != "base64":
                        return self._error(400, "only base64 file content is supported")
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    if value["path"] not in files:
                        return self._error(404, "A file with this name doesn't exist", "EntryNotFound")
                    del files[value["path"]]
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    for path in [p for p in files if p.startswith(folder)]:
                        del files[path]
                elif key == "lfsFile":
                    return self._error(400, "the fake hub accepts regular uploads only")
            oid = self.hub._commit(
                repo, files, title=header.get("summary") or "", message=header.get("description") or "", author=self.hub.user
            )
        prefix = {"dataset": "datasets/", "space": "spaces/"}.get(repo.repo_type, "")
        return self._send(
            200,
            {
                "commitUrl": f"{self.hub.url}/{prefix}{repo.repo_id}/commit/{oid}",
                "commitOid": oid,
                "success": True,
                "pullRequestUrl": None,
            },
        )

    def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        with self.hub._lock:
            repo = self._repo(repo_type, repo_id)
            snap = repo.snapshot(unquote(revision)) if repo else None
        if repo is None:
            return self._error(404, f"Repository {repo_id} not found", "RepoNotFound")
        if snap is None:
            return self._error(404, f"Revision {revision} not found", "RevisionNotFound")
        oid, files = snap.oid, snap.snapshot
        if path not in files:
            return self._error(404, f"Entry {path} not found", "EntryNotFound")
        data = files[path]
        headers = {
            "X-Repo-Commit": oid,
            "ETag": f'"{git_blob_sha1(data)}"',
            "Content-Type": "application/octet-stream",
        }
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(data)
        self.hub.requests.append((self.command, self._path, 200))



if __name__ == "__main__":  # a loopback Hub to try push-results, report and the app against (README)
    import argparse

    parser = argparse.ArgumentParser(description="a fake Hugging Face Hub on 127.0.0.1, in memory, for trying things")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default=None, help="the one token accepted for writes (default: any)")
    parser.add_argument("--user", default="tester", help="the namespace the token writes to (default: tester)")
    opts = parser.parse_args()
    with FakeHub(token=opts.token, user=opts.user, port=opts.port) as server:
        print(f"fake Hub at {server.url} (namespace {opts.user}); Ctrl-C stops it", flush=True)
        try:
            server._thread.join()
        except KeyboardInterrupt:
            pass
