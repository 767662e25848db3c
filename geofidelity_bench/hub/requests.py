"""Talking to the Hugging Face Hub safely: retries, error messages without the token, digests.

Used by the one push of :mod:`geofidelity_bench.hub.push` (benchmark dataset and generated
panels alike).
"""

from __future__ import annotations

import hashlib
import importlib
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import GeoFidelityError, redact_url

TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)
CONFLICT_STATUS = (409, 412)


class HubPushError(GeoFidelityError, RuntimeError):
    """Publishing failed; the message says what to do (it never contains the token)."""


class HubUnreachableError(HubPushError):
    """A request kept failing with transient errors (no connection, timeouts, HTTP 5xx) after all retries."""


class RepoIdError(GeoFidelityError, ValueError):
    """A Hub repo id that the Hub would refuse (``../../etc``, over 96 characters, spaces); checked before any work."""


def check_repo_id(repo_id, what: str = "repo id") -> str:
    """Returns ``repo_id`` when huggingface_hub's validator accepts it (``NAME`` or ``ORG/NAME``: letters,
    digits, ``-``, ``_``, ``.``, at most 96 characters, no ``..`` or ``--``), else raises
    :class:`RepoIdError` naming ``what`` and the id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        shown = repr(repo_id) if len(str(repo_id)) <= 60 else f"{str(repo_id)[:60]!r}... ({len(str(repo_id))} characters)"
        raise RepoIdError(
            f"{what} {shown} is not a valid Hub repo id: use ORG/NAME or NAME with letters, digits, '-', '_' and "
            "'.' (no '..' or '--', not starting or ending with '-' or '.', at most 96 characters)"
        ) from None
    return repo_id


# -- retries ------------------------------------------------------------------------------------


def transient_exception_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests", ("ConnectionError", "Timeout")),
    ):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        types += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    return tuple(types)


def http_status(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def is_transient(err: BaseException) -> bool:
    status = http_status(err)
    if status is not None:
        return status in TRANSIENT_STATUS
    return isinstance(err, transient_exception_types())


def auth_hint(err: BaseException) -> str:
    if http_status(err) in (401, 403):
        return " (is the token valid, with write access to this repo? set HF_TOKEN or run `hf auth login`)"
    return ""


def redact(text: str, token: str | None) -> str:
    """``text`` without the token and without the user-info of any URL in it (an endpoint given as
    ``http://user:password@host``)."""
    text = redact_url(text)
    return text.replace(token, "***") if token else text


def describe_error(err: BaseException, token: str | None) -> str:
    status = http_status(err)
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    label = f"HTTP {status}" if status is not None else type(err).__name__
    return redact(f"{label}: {first}"[:300], token)


def with_retries(
    fn: Callable[[], Any],
    what: str,
    *,
    attempts: int = 6,
    base_delay: float = 1.0,
    max_delay: float = 60.0,
    log: Callable[[str], None] = print,
    token: str | None = None,
) -> Any:
    """Calls ``fn`` until it succeeds, retrying transient errors with exponential backoff.

    Raises:
        HubUnreachableError: the error was still transient at the last attempt (one line,
            naming ``what``; never the token). Other errors are raised as they are.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - classified just below
            if not is_transient(err):
                raise
            if attempt == attempts:
                raise HubUnreachableError(
                    f"{what}: {describe_error(err, token)} (gave up after {attempts} attempt(s))"
                ) from None
            delay = min(max_delay, base_delay * 2 ** (attempt - 1))
            log(f"{what}: transient error ({describe_error(err, token)}); retry {attempt}/{attempts - 1} in {delay:.1f} s")
            time.sleep(delay)
    raise AssertionError("unreachable")


def file_digests(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file, streamed."""
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def same_remote(sibling: Any, digests: tuple[str, str]) -> bool:
    if sibling is None:
        return False
    lfs = getattr(sibling, "lfs", None)
    if lfs is not None:
        return getattr(lfs, "sha256", None) == digests[0]
    return getattr(sibling, "blob_id", None) == digests[1]


def resolve_token(token: str | None = None) -> str:
    from huggingface_hub import get_token

    token = token or get_token()
    if not token:
        raise HubPushError(
            "no Hugging Face token found: set HF_TOKEN or run `hf auth login` (a token with write access)"
        )
    return token


class RepoChanged(Exception):
    """The repo moved past the parent commit while a push was prepared (HTTP 409/412)."""


def commit_files(
    api: Any,
    repo_id: str,
    *,
    add: Mapping[str, bytes | Path],
    delete: Sequence[str] = (),
    message: str,
    parent_commit: str | None,
    what: str,
    retry: Mapping[str, Any],
) -> Any:
    """One ``create_commit`` of ``add`` (bytes or local files) and ``delete`` on ``parent_commit``.

    Transient failures are retried (``retry``: the keyword arguments of :func:`with_retries`).

    Raises:
        RepoChanged: the repo changed meanwhile; read it again and rebuild the commit.
        HubPushError: any other failure (the message never contains the token).
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    def commit():
        # Fresh operation objects on every attempt: create_commit mutates them.
        ops: list[Any] = [
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=c if isinstance(c, bytes) else str(c)) for p, c in add.items()
        ]
        ops += [CommitOperationDelete(path_in_repo=p) for p in delete]
        return api.create_commit(repo_id, ops, commit_message=message, repo_type="dataset", parent_commit=parent_commit)

    token = retry.get("token")
    try:
        return with_retries(commit, f"commit {what} to {repo_id}", **retry)
    except HfHubHTTPError as err:
        if http_status(err) in CONFLICT_STATUS:
            raise RepoChanged(describe_error(err, token)) from None
        raise HubPushError(f"cannot push {what} to {repo_id}: {describe_error(err, token)}{auth_hint(err)}") from None
