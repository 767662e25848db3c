"""A method's scores in its model repo's card: the ``model-index`` entries of a submission's scores
(docs/benchmark.md section 13, Submissions and the leaderboard), keyed by what makes two scores
comparable (benchmark fingerprint, encoder config hash, protocol version), so an update replaces
the entries of the same comparable setting and keeps every other.

:func:`read_model_card` reads (or starts) the card; :func:`update_model_card` writes a results
folder's scores into it; :func:`card_key` is the key of an entry.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import redact_url
from ..metrics.catalog import METRICS
from .card import CARD_FILE
from .submissions import SubmissionError
from .requests import HubPushError, check_repo_id, describe_error, with_retries


def _api(endpoint: str | None, token: str | None = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


#: metric_args keys that hold a model-card entry's comparability key (docs/benchmark.md section 13).
CARD_KEY_ARGS = ("benchmark_fingerprint", "encoder_config_hash", "protocol_version")


@dataclass
class ModelCardUpdate:
    n_results: int  # results in the card afterwards
    written: int  # results written now
    removed: int  # results of the same comparability key that were replaced or removed (a NaN removes)
    unkeyed: int  # older GeoFidelity-Bench results that record no comparability key (kept, not comparable)


def card_key(result) -> tuple | None:
    """The comparability key of a model-index result written by this library (None for others)."""
    args = getattr(result, "metric_args", None) or {}
    if not all(args.get(k) for k in CARD_KEY_ARGS):
        return None
    return (result.task_type, result.dataset_type, *(str(args[k]) for k in CARD_KEY_ARGS))


def read_model_card(model_repo: str, *, endpoint: str | None = None, token: str | None = None):
    """The model repo's card (a new one from the template when the repo has no README.md), parsed.

    ``push-results --model-card`` calls it before anything is pushed, so that a card that cannot
    be updated stops the command before the results are uploaded.

    Raises:
        RepoIdError: ``model_repo`` is not a valid repo id.
        SubmissionError: the card's YAML metadata (or its ``model-index``) cannot be parsed: the
            message names the repo and the line, and says to fix the card first.
        HubPushError: the Hub could not be read.
    """
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

    from .requests import resolve_token

    check_repo_id(model_repo, "model repo id")
    token = resolve_token(token)
    api = _api(endpoint, token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    try:
        with tempfile.TemporaryDirectory(prefix="geofidelity-card-") as cache:
            try:
                path = with_retries(lambda: api.hf_hub_download(model_repo, CARD_FILE, cache_dir=cache),
                                    f"read {model_repo}/{CARD_FILE}", **retry)
            except EntryNotFoundError:
                return ModelCard.from_template(ModelCardData())
            data = Path(path).read_bytes()
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if isinstance(err, RepositoryNotFoundError) or status == 404:
            where = redact_url(endpoint) if endpoint else "the Hub"
            raise HubPushError(
                f"--model-card {model_repo}: model repo not found on {where} (or your token cannot read it): create "
                f"it first (`hf repo create {model_repo}`, or HfApi().create_repo({model_repo!r})), check the name "
                "and the token, or leave out --model-card; nothing was pushed") from None
        raise HubPushError(f"cannot read the model card of {model_repo}: {describe_error(err, token)}") from None
    try:
        return ModelCard(data.decode("utf-8"))
    except Exception as err:  # noqa: BLE001 - yaml's errors and huggingface_hub's ValueError alike
        first = " ".join(str(err).split())[:200]
        raise SubmissionError(
            f"the model card {model_repo}/{CARD_FILE} cannot be updated: it is not UTF-8 text with YAML metadata that "
            "parses "
            f"({type(err).__name__}: {first}); fix the card (or leave out --model-card) and run again"
        ) from None


def update_model_card(
    model_repo: str,
    scores: Sequence[Mapping[str, Any]],
    *,
    comparability,
    encoder: str,
    dataset_type: str,
    dataset_name: str,
    dataset_config: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    source_url: str | None = None,
    card=None,
    verified: bool = False,
) -> ModelCardUpdate:
    """Writes ``scores`` into the ``model-index`` of the model repo's card, keeping its other results.

    ``scores``: ``{"metric": column, "value", "ci_low", "ci_high", "confidence", "n_blocks"}`` records
    of one run. An entry is keyed by the run's comparability key
    (:class:`~geofidelity_bench.comparability.Comparability`: benchmark fingerprint, encoder config
    hash, protocol version) and names the encoder (and, for GAAS, the segmenter); the run replaces
    every entry of the same key, so a NaN score removes the stale value instead of leaving an
    older run's number beside the new ones, and a run with another encoder adds its own entries.
    ``card``: the card as :func:`read_model_card` returned it (default: read now). ``verified``: whether
    the numbers are a verifier's re-computation (``leaderboard verify``); otherwise every entry says it is
    self-reported (``metric_args.verified: false`` and "self-reported" in its name).
    """
    from huggingface_hub import EvalResult
    from huggingface_hub.errors import HfHubHTTPError

    from .requests import resolve_token

    check_repo_id(model_repo, "model repo id")
    if not comparability.complete:
        raise SubmissionError(f"the run records no complete comparability key ({comparability.short()}): "
                              "its scores cannot be written to a model card")
    token = resolve_token(token)
    api = _api(endpoint, token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    fp, enc_hash, protocol = comparability.key
    key_args = dict(zip(CARD_KEY_ARGS, comparability.key))
    if card is None:
        card = read_model_card(model_repo, endpoint=endpoint, token=token)
    try:
        data = card.data
        new = []
        for s in scores:
            value = s["value"]
            if value is None or not math.isfinite(float(value)):
                continue
            info = METRICS[s["metric"]]
            conf = s.get("confidence", 0.95)
            config = f"encoder {encoder} ({enc_hash[:12]}), protocol {protocol}"
            args = {"ci_low": round(float(s["ci_low"]), 6), "ci_high": round(float(s["ci_high"]), 6),
                    "confidence": conf, "encoder": encoder, "verified": bool(verified), **key_args}
            if s.get("n_blocks") is not None:
                args["n_blocks"] = int(s["n_blocks"])
            if s["metric"] == "gaas":
                config += f", segmenter {comparability.segmenter[:12]}"
                args["segmenter"] = comparability.segmenter
            new.append(EvalResult(
                task_type="text-to-image", dataset_type=dataset_type, dataset_name=dataset_name,
                dataset_config=dataset_config, dataset_revision=fp, metric_type=s["metric"],
                metric_value=round(float(value), 6), metric_config=config,
                metric_name=f"{info.label} ({'verified' if verified else 'self-reported, not verified'}; "
                            f"{'higher' if info.higher_is_better else 'lower'} is better; encoder "
                            f"{encoder}; {conf:.0%} CI {float(s['ci_low']):.3f} to {float(s['ci_high']):.3f})",
                metric_args=args, source_name="GeoFidelity-Bench", source_url=source_url,
            ))
        ours = ("text-to-image", dataset_type, fp, enc_hash, protocol)
        before = list(data.eval_results or [])
        kept = [r for r in before if card_key(r) != ours]
        unkeyed = sum(1 for r in kept if card_key(r) is None and r.source_name == "GeoFidelity-Bench")
        data.eval_results = kept + new
        if not data.model_name:
            data.model_name = model_repo.split("/")[-1]
        text = str(card)
        with_retries(lambda: api.upload_file(path_or_fileobj=text.encode("utf-8"), path_in_repo=CARD_FILE,
                                             repo_id=model_repo, commit_message="GeoFidelity-Bench results"),
                     f"update {model_repo}/{CARD_FILE}", **retry)
    except HfHubHTTPError as err:
        raise HubPushError(f"cannot update the model card of {model_repo}: {describe_error(err, token)}") from None
    return ModelCardUpdate(len(data.eval_results), len(new), len(before) - len(kept), unkeyed)


__all__ = ["CARD_KEY_ARGS", "ModelCardUpdate", "card_key", "read_model_card", "update_model_card"]
