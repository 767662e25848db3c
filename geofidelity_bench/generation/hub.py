"""Publishing generated panels as the ``generations`` config of a Hub dataset repo.

Repo layout (beside the benchmark's own configs, which are never touched)::

    generations/{model}/train-00000-of-0000N.parquet   images embedded as datasets.Image()
    README.md                                          YAML ``configs:`` gains ``generations``

Each Parquet row is one image: ``image`` (``{"bytes", "path"}``, path = the panel's relative
path ``{model}/{condition}/{block_id}/{k:02d}.jpg``) plus every manifest column (model,
block_id, condition, k, seed, prompt, negative_prompt, steps, guidance, dtype, versions, sha256,
...). Rows are sorted by (condition, block_id, k) and cut into shards of at most
``max_shard_rows`` rows, so the bytes of a shard only change when its images do.

One commit per model, with ``parent_commit`` set: it adds the model's changed shards, deletes
its stale ones (a previous push with more shards) and updates the README, atomically; other
models' files are never listed in it. Re-running a push is cheap and safe: shards already on
the Hub with the same content (compared by sha256 / git blob id) are not uploaded again, a
model whose files and README entry are up to date makes no commit, and a push interrupted
between models resumes at the first model that is not up to date. Transient failures (HTTP
408/429/5xx, dropped connections) are retried with exponential backoff; a concurrent change of
the repo (HTTP 409/412 on the parent commit) makes the push re-read the repo and try again.

The token comes from ``token=`` or the standard sources (``HF_TOKEN``, ``hf auth login``) and is
never printed or logged. ``endpoint=`` (or ``HF_ENDPOINT``) selects another Hub server.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..hub_requests import (
    HubPushError,
    RepoChanged,
    auth_hint,
    commit_files,
    describe_error,
    file_digests,
    resolve_token,
    same_remote,
    with_retries,
)
from .manifest import MANIFEST_COLUMNS, load_manifest

GENERATIONS_CONFIG = "generations"
GENERATIONS_DIR = "generations"
DEFAULT_MAX_SHARD_ROWS = 500


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


def generation_features():
    """``datasets.Features`` of the ``generations`` config: the image plus manifest columns."""
    from datasets import Features, Image, Value

    types = {"string": "string", "int64": "int64", "float64": "float64"}
    cols = {"image": Image()}
    cols.update({c: Value(types[t]) for c, t in MANIFEST_COLUMNS.items()})
    return Features(cols)


def shard_path(model: str, index: int, total: int) -> str:
    return f"{GENERATIONS_DIR}/{model}/train-{index:05d}-of-{total:05d}.parquet"


def build_model_shards(
    out_dir: str | os.PathLike,
    manifest,
    model: str,
    folder: str | os.PathLike,
    *,
    max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS,
) -> list[tuple[str, Path, int]]:
    """Writes the Parquet shards of one model into ``folder``: ``[(path_in_repo, file, n_rows)]``.

    One shard at a time is held in memory (at most ``max_shard_rows`` images).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if max_shard_rows < 1:
        raise ValueError("max_shard_rows must be >= 1")
    rows = manifest[manifest["model"] == model].sort_values(["condition", "block_id", "k"]).to_dict("records")
    features = generation_features()
    total = max(1, -(-len(rows) // max_shard_rows))
    shards = []
    for i in range(total):
        chunk = rows[i * max_shard_rows : (i + 1) * max_shard_rows]
        batch: dict[str, list[Any]] = {c: [] for c in features}
        for row in chunk:
            data = (Path(out_dir) / row["path"]).read_bytes()
            batch["image"].append({"bytes": data, "path": row["path"]})
            for col in MANIFEST_COLUMNS:
                value = row.get(col)
                batch[col].append(None if is_missing(value) else value)
        table = pa.Table.from_pydict(features.encode_batch(batch), schema=features.arrow_schema)
        repo_path = shard_path(model, i, total)
        local = Path(folder) / f"{model}-{i:05d}.parquet"
        pq.write_table(table, local)
        shards.append((repo_path, local, len(chunk)))
    return shards


def is_missing(value: Any) -> bool:
    try:
        import math

        return value is None or (isinstance(value, float) and math.isnan(value))
    except TypeError:
        return False


# -- README -------------------------------------------------------------------------------------


def split_front_matter(text: str | None) -> tuple[dict[str, Any], str]:
    """``(yaml_metadata, body)`` of a README (empty metadata when it has none)."""
    import yaml

    if not text:
        return {}, ""
    if text.startswith("---"):
        lines = text.splitlines(keepends=True)
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                meta = yaml.safe_load("".join(lines[1:i])) or {}
                if not isinstance(meta, dict):
                    raise HubPushError("the repo's README.md YAML header is not a mapping; fix it by hand first")
                return meta, "".join(lines[i + 1 :])
    return {}, text


def generations_config_entry() -> dict[str, Any]:
    return {
        "config_name": GENERATIONS_CONFIG,
        "data_files": [{"split": "train", "path": f"{GENERATIONS_DIR}/*/*.parquet"}],
    }


def update_readme(text: str | None, repo_files: Sequence[str] = ()) -> str:
    """The README with a ``generations`` entry in ``configs:``, every other entry kept.

    When the README declares no ``configs:`` at all, the repo's other top-level folders of
    Parquet files are declared too (``{folder}/*.parquet``), so that adding the first explicit
    config does not hide data that the Hub used to discover by itself.
    """
    import yaml

    meta, body = split_front_matter(text)
    configs = meta.get("configs")
    if configs is None:
        folders = sorted(
            {
                f.split("/", 1)[0]
                for f in repo_files
                if f.endswith(".parquet") and "/" in f and f.split("/", 1)[0] != GENERATIONS_DIR
            }
        )
        configs = [
            {"config_name": d, "data_files": [{"split": "train", "path": f"{d}/*.parquet"}]} for d in folders
        ]
    if not isinstance(configs, list):
        raise HubPushError("the repo's README.md has a 'configs' field that is not a list; fix it by hand first")
    entry = generations_config_entry()
    configs = [c for c in configs if not (isinstance(c, dict) and c.get("config_name") == GENERATIONS_CONFIG)]
    configs.append(entry)
    meta["configs"] = configs
    if not body.strip():
        body = (
            "\n# Generated panels\n\n"
            "The `generations` config holds GeoFidelity-Bench panels: one row per generated image, with "
            "the image, its prompt, seed, generation settings and library versions.\n"
        )
    header = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return f"---\n{header}---\n{body if body.startswith(chr(10)) else chr(10) + body}"


# -- push ---------------------------------------------------------------------------------------


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

    Args:
        out_dir: a generation folder (panels + manifest).
        repo_id: ``user/name`` of the dataset repo (created if missing).
        models: which models to push (default: every model of the manifest).
        token: Hub token (default: ``HF_TOKEN`` / the stored login); never printed.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` or https://huggingface.co).
        private: visibility when the repo is created (ignored when it exists).
        max_shard_rows: rows per Parquet shard.
        attempts, retry_base_delay: retries of transient errors (delay doubles each time).
        log: where progress messages go (default: print).
    """
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    say = log or (lambda msg: print(msg, flush=True))
    if constants.is_offline_mode():
        raise HubPushError("HF_HUB_OFFLINE is set: unset it (or set HF_HUB_OFFLINE=0) to push to the Hub")
    token = resolve_token(token)
    api = HfApi(endpoint=endpoint, token=token)
    retry = dict(attempts=attempts, base_delay=retry_base_delay, log=say, token=token)

    manifest = load_manifest(out_dir, verify=True)
    if manifest.empty:
        raise HubPushError(f"{out_dir}: no generated image with a valid manifest row to push")
    available = sorted(manifest["model"].unique())
    chosen = list(models) if models else available
    missing = [m for m in chosen if m not in available]
    if missing:
        raise HubPushError(f"{out_dir} has no images of model(s) {missing}; it has {available}")

    try:
        exists = with_retries(lambda: api.repo_exists(repo_id, repo_type="dataset"), f"look up {repo_id}", **retry)
        if not exists:
            with_retries(
                lambda: api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private),
                f"create dataset repo {repo_id}",
                **retry,
            )
    except HfHubHTTPError as err:
        raise HubPushError(f"cannot create or access dataset repo {repo_id}: {describe_error(err, token)}{auth_hint(err)}") from None

    report = PushReport(repo_id, [])
    for model in chosen:
        with tempfile.TemporaryDirectory(prefix="geofidelity-push-") as folder:
            report.models.append(
                _push_model(
                    api, repo_id, out_dir, manifest, model, folder,
                    max_shard_rows=max_shard_rows, attempts=attempts, retry=retry, say=say, token=token,
                )
            )
    return report


def _push_model(
    api: Any,
    repo_id: str,
    out_dir: str | os.PathLike,
    manifest: Any,
    model: str,
    folder: str,
    *,
    max_shard_rows: int,
    attempts: int,
    retry: dict[str, Any],
    say: Callable[[str], None],
    token: str,
) -> ModelPush:
    """One model: write its shards, compare with the repo, commit what changed (see module doc)."""
    from huggingface_hub.errors import HfHubHTTPError

    shards = build_model_shards(out_dir, manifest, model, folder, max_shard_rows=max_shard_rows)
    digests = {p: file_digests(local) for p, local, _ in shards}
    result = ModelPush(model, int((manifest["model"] == model).sum()), [p for p, _, _ in shards])
    prefix = f"{GENERATIONS_DIR}/{model}/"
    for conflict_try in range(1, attempts + 1):
        try:
            info = with_retries(lambda: api.dataset_info(repo_id, files_metadata=True), f"read repo {repo_id}", **retry)
        except HfHubHTTPError as err:
            raise HubPushError(f"cannot read dataset repo {repo_id}: {describe_error(err, token)}{auth_hint(err)}") from None
        remote = {s.rfilename: s for s in (info.siblings or [])}
        readme = None
        if "README.md" in remote:
            readme = with_retries(
                lambda: _read_text(api, repo_id, "README.md", info.sha), f"read {repo_id}/README.md", **retry
            )
        new_readme = update_readme(readme, list(remote) + result.shards)
        changed = [(p, local) for p, local, _ in shards if not same_remote(remote.get(p), digests[p])]
        stale = sorted(p for p in remote if p.startswith(prefix) and p not in result.shards)
        readme_changed = new_readme != readme
        if not changed and not stale and not readme_changed:
            say(f"{repo_id}: {model} is up to date ({result.rows} images in {len(shards)} shard(s))")
            return result

        add: dict[str, bytes | Path] = {p: local for p, local in changed}
        if readme_changed:
            add["README.md"] = new_readme.encode("utf-8")
        try:
            done = commit_files(api, repo_id, add=add, delete=stale, parent_commit=info.sha, what=model, retry=retry,
                                message=f"Add generations of {model} ({result.rows} images)")
        except RepoChanged as err:
            if conflict_try == attempts:
                break
            say(f"{repo_id} changed while pushing {model} ({err}); reading it again")
            continue
        result.uploaded = [p for p, _ in changed]
        result.deleted = stale
        result.readme_updated = readme_changed
        result.commit = getattr(done, "oid", None)
        say(
            f"{repo_id}: pushed {model}: {result.rows} images, {len(changed)} shard(s) uploaded, "
            f"{len(stale)} stale shard(s) removed{', README updated' if readme_changed else ''}"
        )
        return result
    raise HubPushError(f"{repo_id} kept changing while pushing {model}; try again later")


def _read_text(api: Any, repo_id: str, filename: str, revision: str | None) -> str:
    with tempfile.TemporaryDirectory(prefix="geofidelity-hub-") as cache:
        path = api.hf_hub_download(
            repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision, cache_dir=cache
        )
        return Path(path).read_text(encoding="utf-8")
