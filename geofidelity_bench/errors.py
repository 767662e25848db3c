"""The errors a user can cause, and the one wording of how to work offline.

Every exception the library raises for bad input, a missing model or an unreachable service
subclasses :class:`GeoFidelityError`, so the command line catches that one class, prints the
message (which names the bad input and says what to do) and exits with status 2. Each error
class keeps its historical ``ValueError``/``RuntimeError`` base as well, so existing
``except ValueError`` code keeps working. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import re


class GeoFidelityError(Exception):
    """Base of every error a user can cause (bad input, missing weights, unreachable service)."""


#: ``scheme://`` then the user-info of a URL: everything up to the last ``@`` before the host ends
#: (``/``, ``?``, ``#``, white space or a quote), so a password holding ``@`` or ``:`` goes whole.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s'\"<>`@]*(?:@[^/?#\s'\"<>`@]*)*@")
REDACTED_USERINFO = "***@"


def redact_url(text: str) -> str:
    """``text`` with the user-info (``user:password@``) of every URL in it replaced by ``***@``.

    The one redaction of credentials given inside a URL (``--endpoint http://user:pw@host``), applied
    wherever a URL reaches a message, a log line, a summary file or a card.

    >>> redact_url("cannot reach http://alice:s3cret@hub.local:8080/api (and https://h.example/x)")
    'cannot reach http://***@hub.local:8080/api (and https://h.example/x)'
    """
    return _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED_USERINFO, str(text))


class ModelUnavailableError(GeoFidelityError, RuntimeError):
    """A model's weights, processor or package cannot be had; the message says how to run offline.

    The one "model unavailable" error of encoders, segmenters, the GeoDiv VQA backend and the MFP
    feature extractor (each keeps a subclass under its historical name).
    """


#: What a loader's error says when it could not reach the Hub (transformers, huggingface_hub).
_CONNECTION_WORDS = ("couldn't connect", "could not connect", "offline mode", "hf_hub_offline", "connection",
                     "localentrynotfound", "cannot find the requested files in the local cache")


def load_failure_reason(err: BaseException, what: str = "the weights") -> str:
    """Why a model's files could not be loaded, in one consistent sentence (no trailing period).

    With ``HF_HUB_OFFLINE`` set, a loader's "couldn't connect to https://huggingface.co" is not what
    happened (the Hub was never contacted): the reason then says that ``HF_HUB_OFFLINE`` is set and
    the local cache holds no copy of ``what``. Any other error keeps its own text (a damaged
    local folder, a missing package), with no word about the Hub."""
    from huggingface_hub import constants  # what the loaders obeyed (read when huggingface_hub was imported)

    reason = " ".join(str(err).split()).rstrip(". ")
    offline = bool(constants.HF_HUB_OFFLINE)
    text = f"{type(err).__name__} {reason}".lower()
    if offline and any(w in text for w in _CONNECTION_WORDS):
        return (f"HF_HUB_OFFLINE is set and the local Hugging Face cache holds no copy of {what} "
                "(the Hub was not contacted)")
    return reason


def offline_hint(
    *,
    flag: str,
    python_arg: str,
    weights_id: str | None = None,
    saved_with: str = "save_pretrained()",
    alternative: str | None = None,
) -> str:
    """How to run a model-backed step without the Hub: one wording for every model family.

    Args:
        flag: the command-line option that takes a local folder (e.g. ``--encoder-weights``).
        python_arg: the Python argument that takes it (e.g. ``weights=``).
        weights_id: the Hub id of the default weights, when there is one to fetch elsewhere.
        saved_with: what wrote the folder (e.g. ``ViTModel.save_pretrained()``).
        alternative: one more sentence, e.g. a model that needs no download.

    >>> offline_hint(flag="--encoder-weights", python_arg="weights=")
    'To run offline, pass a local folder saved with save_pretrained() as weights=PATH in Python (--encoder-weights PATH on the command line).'
    """
    fetch = (
        f"fetch {weights_id!r} once where the Hub is reachable (`hf download {weights_id}`, then copy the "
        "Hugging Face cache), or "
        if weights_id
        else ""
    )
    hint = (
        f"To run offline, {fetch}pass a local folder saved with {saved_with} as {python_arg}PATH in Python "
        f"({flag} PATH on the command line)."
    )
    return f"{hint} {alternative}" if alternative else hint
