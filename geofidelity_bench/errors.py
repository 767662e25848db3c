"""The errors a user can cause, and the one wording of how to work offline.

Every exception the library raises for bad input, a missing model or an unreachable service
subclasses :class:`GeoFidelityError`, so the command line catches that one class, prints the
message (which names the bad input and says what to do) and exits with status 2. Each error
class keeps its historical ``ValueError``/``RuntimeError`` base as well, so existing
``except ValueError`` code keeps working. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Any


class GeoFidelityError(Exception):
    """Base of every error a user can cause (bad input, missing weights, unreachable service)."""


#: How many times a URL nested in another URL's query may have been percent-encoded and still be
#: redacted: plain, once, twice, three times (a link inside a link inside a link).
MAX_ENCODING_LEVEL = 3
REDACTED = "***"
REDACTED_USERINFO = REDACTED + "@"

#: Query parameters whose value is a credential (``?access_token=...``, ``&sig=...``), in any case, and
#: any parameter whose name ends with one of them (``hub_token``, ``upload_sig``).
SECRET_PARAMS = ("access_token", "token", "client_secret", "secret", "api_key", "apikey", "key", "password",
                 "passwd", "pwd", "pass", "signature", "sig", "credential", "auth")
#: Of those, the names that are a credential even outside a query string (``access_token=...`` at the
#: start of a message or after a space); the short ones (``key=``, ``sig=``) only after ``?``, ``&``, ``;``.
_BARE_SECRET_PARAMS = ("access_token", "refresh_token", "id_token", "auth_token", "token", "client_secret",
                       "api_key", "apikey", "password", "passwd")


def _enc(char: str, level: int) -> str:
    """A regex for ``char`` percent-encoded exactly ``level`` times (``@``, ``%40``, ``%2540``, ...)."""
    return re.escape(char) if level == 0 else "%" + "25" * (level - 1) + f"{ord(char):02X}"


def _any_of(chars: str, levels: range) -> str:
    return "|".join(_enc(c, j) for j in levels for c in chars)


def _userinfo_pattern(level: int) -> re.Pattern:
    """``scheme://user:password@`` with its ``:`` and ``@`` encoded ``level`` times (the slashes at any level
    up to it: ``quote(url)`` leaves them plain). Groups: the prefix, the user-info, the ``@``.

    The user-info runs up to the last ``@`` of that level before the host ends (a ``/``, ``?`` or ``#`` of
    that level or an outer one, white space, a double quote or ``<>```; in a nested URL also an outer
    ``@`` or ``&``), so a password holding ``@`` or ``:`` goes whole, and every RFC 3986 user-info
    character counts, the sub-delimiters ``!$&'()*+,;=`` included (``http://user:it's@host``).
    Unencoded, a ``Path`` may have collapsed ``//`` into ``/`` (a URL given as a folder): ``http:/u:pw@h``
    counts as well, except after a one-letter scheme (a Windows drive, ``C:/``)."""
    at = _enc("@", level)
    if level == 0:
        prefix = r"((?:[a-z][a-z0-9+.-]{1,30}:/{1,2}|[a-z]://))"
        unit = r"[^/?#\s\"<>`@]"
    else:
        slash = "(?:" + _any_of("/", range(level + 1)) + ")"
        prefix = f"([a-z][a-z0-9+.-]{{0,30}}{_enc(':', level)}{slash}{slash})"
        stops = [r"[\s\"<>`]", _any_of("/?#", range(level + 1)), _any_of("@&", range(level)), at]
        unit = f"(?:(?!{'|'.join(stops)}).)"
    return re.compile(f"(?i){prefix}({unit}*(?:{at}{unit}*)*)({at})")


def _param_pattern(level: int) -> re.Pattern:
    """``?access_token=VALUE`` (and the other :data:`SECRET_PARAMS`) with its ``=`` encoded ``level`` times.
    Groups: everything up to the value, the value (up to an ``&`` or ``#`` of that level or an outer one,
    white space, a quote, a backslash (a JSON escape), a comma or a closing bracket)."""
    separators = _any_of("?&;", range(level + 1)) + ("|" + _any_of("=", range(level)) if level else "")
    names = "|".join(re.escape(n) for n in SECRET_PARAMS)
    bare = "|".join(re.escape(n) for n in _BARE_SECRET_PARAMS)
    stops = [r"[\s\"'<>`)\]},\\]", _any_of("&#", range(level + 1))]
    eq = _enc("=", level)
    return re.compile(f"(?i)((?:{separators})[a-z0-9_.-]*(?:{names}){eq}|(?:^|(?<=[\\s\"'(\\[{{,]))(?:{bare}){eq})"
                      f"((?:(?!{'|'.join(stops)}).)+)")


_LEVELS = range(MAX_ENCODING_LEVEL + 1)
#: (what the text must hold for the pattern to apply, the pattern), per encoding level
_USERINFO = [(":" if k == 0 else _enc(":", k).lower(), _userinfo_pattern(k)) for k in _LEVELS]
_PARAMS = [("=" if k == 0 else _enc("=", k).lower(), _param_pattern(k)) for k in _LEVELS]


def redact_url(text: Any) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``: the user-info
    (``user:password@``) and the value of every credential query parameter (:data:`SECRET_PARAMS`:
    ``access_token=``, ``token=``, ``key=``, ``password=``, ``sig=``, ...), also inside a URL nested in
    another URL's query and percent-encoded once, twice or three times (:data:`MAX_ENCODING_LEVEL`).

    The one redaction of credentials given inside a URL (``--endpoint http://user:pw@host``), applied
    wherever a URL reaches a message, a log line, a warning, a summary file or a card (the command line
    applies it to every log record and warning while a command runs: :mod:`geofidelity_bench.cli`).

    >>> redact_url("cannot reach http://alice:s3cret@hub.local:8080/api (and https://h.example/x)")
    'cannot reach http://***@hub.local:8080/api (and https://h.example/x)'
    >>> redact_url("http://u:it's@h/x?next=http%3A%2F%2Fv%3Apw%40h2%2F%3Faccess_token%3Dtok%26a%3D1")
    'http://***@h/x?next=http%3A%2F%2F***%40h2%2F%3Faccess_token%3D***%26a%3D1'
    """
    out = str(text)
    low = out.lower()
    for marker, pattern in _USERINFO:
        if marker in low:
            out = pattern.sub(lambda m: m.group(1) + REDACTED + m.group(3), out)
    low = out.lower()
    for marker, pattern in _PARAMS:
        if marker in low:
            out = pattern.sub(lambda m: m.group(1) + REDACTED, out)
    return out


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
