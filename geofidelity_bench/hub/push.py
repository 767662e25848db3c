"""The one resumable push to a Hub dataset repo, used by ``push-dataset``, ``push-generations``
and ``generate --push-to-hub``.

A push is a sequence of *groups*, one commit each, with ``parent_commit`` set:

- :func:`push_dataset` (a folder written by ``build-dataset``): each benchmark config, each
  model's generations, then the card (``README.md`` + ``LICENSE.md``);
- :func:`push_generations` (a folder written by ``generate``, or any folder in the layout
  ``evaluate --generated`` reads): each model's generations, the repo's README updated in the same commit to declare the ``generations`` config
  (:func:`~geofidelity_bench.hub.card.update_readme`), everything else in the repo untouched.

For each group :func:`push` reads the repo, compares every file by sha256 (LFS) or git blob id,
and commits only what changed, deleting the stale files under the folder the group owns (a
config or a model re-sharded); a group that is up to date makes no commit, so re-running a push
is cheap and an interrupted push resumes at the first group that is not up to date. Other
models' generations already in the repo are never touched (the built card keeps their
``generations`` entry). Transient failures (HTTP 408/429/5xx, dropped connections) are retried
with exponential backoff; a concurrent change of the repo (HTTP 409/412 on the parent commit)
makes the push re-read the repo and try again.

The token comes from ``token=`` or the standard sources (``HF_TOKEN``, ``hf auth login``) and is
never printed or logged. ``endpoint=`` (or ``HF_ENDPOINT``) selects another Hub server.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..benchmark import CONFIGS as BENCHMARK_CONFIGS
from ..errors import redact_url
from ..manifest_format import MANIFEST_FILE, journal_files, load_manifest
from .card import CARD_FILE, LICENSE_FILE, card_with_foreign_generations, fill_repo_id, update_readme
from .configs import GENERATIONS_DIR, folder_manifest
from .parquet import DEFAULT_MAX_SHARD_ROWS, build_model_shards
from .requests import (
    HubPushError,
    HubUnreachableError,
    RepoChanged,
    auth_hint,
    check_repo_id,
    commit_files,
    describe_error,
    file_digests,
    resolve_token,
    same_remote,
    with_retries,
)

#: Given the repo's file list and a function that reads its current README (None if absent),
#: the README.md to commit with a group.
CardFn = Callable[[Sequence[str], Callable[[], "str | None"]], str]


@dataclass
class PushGroup:
    """One commit of a push: files, the repo folder they own, and optionally the README.

    ``files`` maps paths in the repo to local files or bytes. Files in the repo under ``owns``
    that are not in ``files`` are deleted in the same commit. ``card``, when given, computes the
    README.md committed with the group from the repo's current state. ``label``, ``unit`` and
    ``rows`` only shape the progress messages; ``message`` is the commit message, given the
    paths added and deleted.
    """

    name: str
    files: Mapping[str, Path | bytes]
    owns: str | None
    message: Callable[[Sequence[str], Sequence[str]], str]
    card: CardFn | None = None
    label: str | None = None
    unit: str = "file"
    rows: int | None = None


@dataclass
class GroupPush:
    """What the push of one group did (``commit`` is None when the group was up to date)."""

    name: str
    files: list[str]
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    commit: str | None = None

    @property
    def up_to_date(self) -> bool:
        return self.commit is None


@dataclass
class DatasetPushReport:
    repo_id: str
    groups: list[GroupPush]

    @property
    def uploaded(self) -> list[str]:
        return [p for g in self.groups for p in g.uploaded]

    @property
    def commits(self) -> list[str]:
        return [g.commit for g in self.groups if g.commit]


@dataclass
class ModelPush:
    model: str
    rows: int
    shards: list[str]
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    readme_updated: bool = False
    commit: str | None = None

    @property
    def up_to_date(self) -> bool:
        return self.commit is None


@dataclass
class PushReport:
    repo_id: str
    models: list[ModelPush]


# -- the engine ---------------------------------------------------------------------------------


class HubRepo:
    """A dataset repo to push to: the API client, the token and the retry policy.

    Creating one checks that the Hub may be reached (``HF_HUB_OFFLINE``) and that a token exists;
    it makes no request.
    """

    def __init__(
        self,
        repo_id: str,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        attempts: int = 6,
        retry_base_delay: float = 1.0,
        log: Callable[[str], None] | None = None,
    ):
        from huggingface_hub import HfApi, constants

        check_repo_id(repo_id, "repo id")
        if constants.is_offline_mode():
            raise HubPushError("HF_HUB_OFFLINE is set: unset it (or set HF_HUB_OFFLINE=0) to push to the Hub")
        self.repo_id = repo_id
        self.say = log or (lambda msg: print(msg, flush=True))
        self.token = resolve_token(token)
        self.api = HfApi(endpoint=endpoint, token=self.token)
        self.attempts = attempts
        self.retry = dict(attempts=attempts, base_delay=retry_base_delay, log=self.say, token=self.token)

    def _failed(self, what: str, err: BaseException) -> HubPushError:
        return HubPushError(f"{what} {self.repo_id}: {describe_error(err, self.token)}{auth_hint(err)}")

    def ensure_exists(self, private: bool | None) -> None:
        from huggingface_hub.errors import HfHubHTTPError

        repo_id, api = self.repo_id, self.api
        try:
            if with_retries(lambda: api.repo_exists(repo_id, repo_type="dataset"), f"look up {repo_id}", **self.retry):
                return
            with_retries(
                lambda: api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private),
                f"create dataset repo {repo_id}",
                **self.retry,
            )
        except HfHubHTTPError as err:
            raise self._failed("cannot create or access dataset repo", err) from None
        self.say(f"{repo_id}: created dataset repo{' (private)' if private else ''}")

    def info(self):
        from huggingface_hub.errors import HfHubHTTPError

        try:
            return with_retries(
                lambda: self.api.dataset_info(self.repo_id, files_metadata=True), f"read repo {self.repo_id}", **self.retry
            )
        except HfHubHTTPError as err:
            raise self._failed("cannot read dataset repo", err) from None

    def read_text(self, filename: str, revision: str | None) -> str:
        def read() -> str:
            with tempfile.TemporaryDirectory(prefix="geofidelity-hub-") as cache:
                path = self.api.hf_hub_download(
                    repo_id=self.repo_id, filename=filename, repo_type="dataset", revision=revision, cache_dir=cache
                )
                return Path(path).read_text(encoding="utf-8")

        return with_retries(read, f"read {self.repo_id}/{filename}", **self.retry)

    def push_group(self, group: PushGroup) -> GroupPush:
        """Commits what changed in ``group`` (nothing when it is up to date); see the module doc."""
        repo_id, say = self.repo_id, self.say
        label = group.label or group.name
        result = GroupPush(group.name, list(group.files))
        digests = {p: _digests(c) for p, c in group.files.items()}
        extra_card = group.card is not None and CARD_FILE not in group.files
        for conflict_try in range(1, self.attempts + 1):
            info = self.info()
            remote = {s.rfilename: s for s in (info.siblings or [])}
            contents: dict[str, Path | bytes] = dict(group.files)
            sums = dict(digests)
            if group.card is not None:
                def current(revision=info.sha) -> str | None:
                    return self.read_text(CARD_FILE, revision) if CARD_FILE in remote else None

                contents[CARD_FILE] = group.card(list(remote), current).encode("utf-8")
                sums[CARD_FILE] = _digests(contents[CARD_FILE])
            changed = [p for p in contents if not same_remote(remote.get(p), sums[p])]
            stale = sorted(p for p in remote if group.owns and p.startswith(group.owns) and p not in contents)
            if not changed and not stale:
                n = len(group.files)
                what = f"{group.rows} images in {n} {group.unit}(s)" if group.rows is not None else f"{n} {group.unit}(s)"
                say(f"{repo_id}: {label} is up to date ({what})")
                return result
            try:
                done = commit_files(
                    self.api, repo_id, add={p: contents[p] for p in changed}, delete=stale,
                    parent_commit=info.sha, what=label, retry=self.retry, message=group.message(changed, stale),
                )
            except RepoChanged as err:
                if conflict_try == self.attempts:
                    break
                say(f"{repo_id} changed while pushing {label} ({err}); reading it again")
                continue
            result.uploaded, result.deleted = changed, stale
            result.commit = getattr(done, "oid", None) or "committed"
            card_updated = extra_card and CARD_FILE in changed
            n_files = len(changed) - card_updated
            say(
                f"{repo_id}: pushed {label}: "
                + (f"{group.rows} images, " if group.rows is not None else "")
                + f"{n_files} {group.unit}(s) uploaded, {len(stale)} stale {group.unit}(s) removed"
                + (", README updated" if card_updated else "")
            )
            return result
        raise HubPushError(f"{repo_id} kept changing while pushing {label}; try again later")


def _digests(content: Path | bytes) -> tuple[str, str]:
    """(sha256, git blob sha1) of a local file or of bytes."""
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest(), hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    return file_digests(Path(content))


def push(repo: HubRepo, groups: Iterable[PushGroup], *, private: bool | None = None) -> list[GroupPush]:
    """Creates the repo if needed, then pushes each group in order (one commit per changed group).

    ``groups`` may be a generator: a group is only built once the previous one is pushed (this
    keeps one model's shards on disk at a time).

    Raises:
        HubPushError: one line naming the endpoint and the groups already on the Hub (after
            the retries when the Hub cannot be reached; re-running the push resumes).
    """
    done: list[GroupPush] = []
    try:
        repo.ensure_exists(private)
        for group in groups:
            done.append(repo.push_group(group))
    except HubPushError as err:
        raise type(err)(f"{err}; {_progress(repo, done, resumable=isinstance(err, HubUnreachableError))}") from None
    return done


def _progress(repo: HubRepo, done: Sequence[GroupPush], *, resumable: bool) -> str:
    """What a failed push had already finished on the Hub, in one clause."""
    where = f"{repo.repo_id} at {redact_url(repo.api.endpoint)}"
    if done:
        parts = [f"{g.name} ({'up to date' if g.up_to_date else f'{len(g.uploaded)} file(s) uploaded'})" for g in done]
        text = f"already on {where}: {', '.join(parts)}"
    else:
        text = f"nothing was uploaded to {where}"
    return text + ("; re-run the same command to resume (finished parts are skipped)" if resumable else "")


# -- a built dataset folder ---------------------------------------------------------------------


def _check_built(folder: Path) -> None:
    if not folder.is_dir():
        raise HubPushError(f"{folder} is not a folder")
    missing = [c for c in ("blocks", "references") if not any((folder / c).glob("*.parquet"))]
    if missing or not (folder / CARD_FILE).is_file():
        what = ", ".join([*(f"{c}/*.parquet" for c in missing), *([CARD_FILE] if not (folder / CARD_FILE).is_file() else [])])
        raise HubPushError(
            f"{folder} is not a built dataset folder (missing {what}); run `geofidelity-bench build-dataset SRC --out {folder}` first"
        )


def _update_message(name: str) -> Callable[[Sequence[str], Sequence[str]], str]:
    return lambda changed, stale: f"Update {name} ({len(changed)} file(s) added, {len(stale)} removed)"


def dataset_groups(folder: Path, repo_id: str | None = None) -> list[PushGroup]:
    """The groups of a built folder in push order: configs, each model's generations, the card.

    With ``repo_id``, the card's ``REPO_ID`` placeholders become that id.
    """
    from ..curation.card import CURATION_SUMMARY_FILE

    groups: list[PushGroup] = []
    for config in BENCHMARK_CONFIGS:
        files = sorted((folder / config).glob("*.parquet"))
        if files:
            groups.append(PushGroup(config, {f"{config}/{f.name}": f for f in files}, f"{config}/", _update_message(config)))
    gen_root = folder / GENERATIONS_DIR
    local_models: set[str] = set()
    if gen_root.is_dir():
        for model_dir in sorted(p for p in gen_root.iterdir() if p.is_dir()):
            files = sorted(model_dir.glob("*.parquet"))
            if files:
                prefix = f"{GENERATIONS_DIR}/{model_dir.name}/"
                name = f"{GENERATIONS_DIR}/{model_dir.name}"
                groups.append(PushGroup(name, {prefix + f.name: f for f in files}, prefix, _update_message(name)))
                local_models.add(model_dir.name)

    card_path = folder / CARD_FILE

    def card(remote: Sequence[str], _current) -> str:
        text = card_path.read_text(encoding="utf-8")
        if repo_id is not None:
            text = fill_repo_id(text, repo_id)
        foreign = {p.split("/")[1] for p in remote if p.startswith(f"{GENERATIONS_DIR}/") and p.endswith(".parquet")}
        return card_with_foreign_generations(text, remote) if foreign - local_models else text

    card_files: dict[str, Path | bytes] = {CARD_FILE: card_path}
    if (folder / LICENSE_FILE).is_file():
        card_files[LICENSE_FILE] = folder / LICENSE_FILE
    if (folder / CURATION_SUMMARY_FILE).is_file():  # a curated benchmark's record, which its card cites
        card_files[CURATION_SUMMARY_FILE] = folder / CURATION_SUMMARY_FILE
    groups.append(PushGroup("card", card_files, None, _update_message("card"), card=card))
    return groups


def push_dataset(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> DatasetPushReport:
    """Uploads a built dataset folder to the dataset repo ``repo_id`` (created if missing).

    Resumable and idempotent (see the module docstring). The token comes from ``token`` or the
    standard sources (``HF_TOKEN``, ``hf auth login``); ``endpoint`` selects another Hub server.
    """
    folder = Path(folder)
    check_repo_id(repo_id, "repo id")
    _check_built(folder)
    repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts, retry_base_delay=retry_base_delay, log=log)
    return DatasetPushReport(repo_id, push(repo, dataset_groups(folder, repo_id), private=private))


# -- a generation folder ------------------------------------------------------------------------


def push_generations(
    out_dir: str | os.PathLike,
    repo_id: str,
    *,
    models: Sequence[str] | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
    max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> PushReport:
    """Uploads the panels of ``out_dir`` to ``repo_id`` (a dataset repo) as the ``generations`` config.

    One group (commit) per model: its shards ``generations/{model}/train-*.parquet`` (rows
    sorted by condition, block_id, k; at most ``max_shard_rows`` per shard) and the repo's
    README with a ``generations`` entry in ``configs:``.

    A folder without ``manifest.parquet`` (and without the journals of a running or killed
    ``generate``) is read in the layout ``evaluate --generated`` reads,
    ``{model}/{condition}/{block_id}/NN.{jpg,jpeg,png,webp}``
    (:func:`~geofidelity_bench.hub.configs.folder_manifest`): each row holds the file's own bytes,
    its real relative path and its sha256 (the same file and hash ``evaluate`` scored), and the
    columns only ``generate`` knows (seed, prompt, settings) are empty.

    Args:
        out_dir: a generation folder (panels + manifest), or any folder of panels in that layout.
        repo_id: ``user/name`` of the dataset repo (created if missing).
        models: which models to push (default: every model of the manifest).
        token: Hub token (default: ``HF_TOKEN`` / the stored login); never printed.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` or https://huggingface.co).
        private: visibility when the repo is created (ignored when it exists).
        max_shard_rows: rows per Parquet shard.
        attempts, retry_base_delay: retries of transient errors (delay doubles each time).
        log: where progress messages go (default: print).
    """
    import pandas as pd

    from ..manifest_format import MANIFEST_COLUMNS

    repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts, retry_base_delay=retry_base_delay, log=log)
    # A generate folder is read through its manifest (verified hashes, seeds, settings), exactly as
    # before; any other folder of panels through a scan of its files.
    from_scan = not (Path(out_dir) / MANIFEST_FILE).is_file() and not journal_files(out_dir)
    if from_scan:
        manifest = pd.DataFrame(folder_manifest(out_dir), columns=list(MANIFEST_COLUMNS))
        if manifest.empty:
            raise HubPushError(
                f"{out_dir}: no generated image to push: neither a generation {MANIFEST_FILE} nor panel files "
                "{model}/{condition}/{block_id}/NN.jpg (or .jpeg/.png/.webp)")
    else:
        manifest = load_manifest(out_dir, verify=True)
        if manifest.empty:
            raise HubPushError(f"{out_dir}: no generated image with a valid manifest row to push")
    available = sorted(manifest["model"].unique())
    chosen = list(models) if models else available
    missing = [m for m in chosen if m not in available]
    if missing:
        raise HubPushError(f"{out_dir} has no images of model(s) {missing}; it has {available}")

    def groups() -> Iterator[PushGroup]:
        for model in chosen:
            with tempfile.TemporaryDirectory(prefix="geofidelity-push-") as folder:
                shards = build_model_shards(out_dir, manifest, model, folder, max_shard_rows=max_shard_rows,
                                            from_scan=from_scan)
                paths = [p for p, _, _ in shards]
                rows = int((manifest["model"] == model).sum())
                yield PushGroup(
                    f"{GENERATIONS_DIR}/{model}",
                    {p: local for p, local, _ in shards},
                    f"{GENERATIONS_DIR}/{model}/",
                    lambda changed, stale, model=model, rows=rows: f"Add generations of {model} ({rows} images)",
                    card=lambda remote, current, paths=paths: update_readme(current(), list(remote) + paths),
                    label=model,
                    unit="shard",
                    rows=rows,
                )

    report = PushReport(repo_id, [])
    for model, done in zip(chosen, push(repo, groups(), private=private)):
        report.models.append(
            ModelPush(
                model,
                int((manifest["model"] == model).sum()),
                [p for p in done.files],
                uploaded=[p for p in done.uploaded if p != CARD_FILE],
                deleted=done.deleted,
                readme_updated=CARD_FILE in done.uploaded,
                commit=done.commit,
            )
        )
    return report


__all__ = [
    "DatasetPushReport",
    "GroupPush",
    "HubPushError",
    "HubRepo",
    "ModelPush",
    "PushGroup",
    "PushReport",
    "dataset_groups",
    "push",
    "push_dataset",
    "push_generations",
]
