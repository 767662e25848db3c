"""A small HTTP client for the curation services (standard library only): timeouts, retries with
growing sleeps, and secrets redacted from every message it produces.

Retry rules (:class:`RetryPolicy`):

* HTTP 429 (rate limited): up to ``max_rate_retries`` retries, sleeping
  ``rate_base_s * 2**attempt`` seconds (a numeric ``Retry-After`` is honored when longer),
  capped at ``max_sleep_s``;
* HTTP 5xx, timeouts, dropped connections, short bodies and answers the caller's ``validate``
  rejects: up to ``max_server_retries`` retries, sleeping ``server_base_s * (attempt + 1)``;
* any other status fails at once.

Every sleep goes through ``policy.sleep(seconds * policy.scale)``, so tests can run the real
schedule instantly and still check it.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import MAX_ENCODING_LEVEL, redact_url

_AUTH_HEADER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:oauth|bearer)\s+)[^\s'\",}]+")
REDACTED = "***"


def secret_forms(secret: str) -> list[str]:
    """The forms ``secret`` can take in a URL or a message: itself, percent-encoded once, twice and three times
    (``quote`` with and without ``/`` kept, ``quote_plus``), longest first."""
    forms = {secret}
    for quote in (lambda s: urllib.parse.quote(s, safe=""), urllib.parse.quote,
                  lambda s: urllib.parse.quote_plus(s, safe="")):
        text = secret
        for _ in range(MAX_ENCODING_LEVEL):
            text = quote(text)
            forms.add(text)
    return sorted(forms, key=len, reverse=True)


def redact(text: Any, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every secret (in each of its :func:`secret_forms`), every OAuth/Bearer authorization
    value, and the credentials of every URL (user-info and ``access_token=``-like parameters, plain,
    percent-encoded or nested: :func:`~geofidelity_bench.errors.redact_url`) replaced by ``***``."""
    out = str(text)
    forms = [form for secret in secrets if secret and len(secret) >= 4 for form in secret_forms(secret)]
    if forms:  # in any case: a hex digit or a whole text may have been lower-cased on the way
        out = re.sub("|".join(re.escape(f) for f in sorted(set(forms), key=len, reverse=True)), REDACTED, out,
                     flags=re.IGNORECASE)
    out = redact_url(out)
    return _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, out)


def strip_query_params(url: str, names: Sequence[str] = ("access_token",)) -> str:
    """``url`` without the given query parameters (e.g. a token a server echoed into a link)."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in names]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


#: the schemes a request may use (and be redirected to) unless the caller narrows them: never
#: ``file:``, ``ftp:`` or ``data:``, which urllib would otherwise open
WEB_SCHEMES = ("http", "https")


def origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of ``url``, the port made explicit for http and https; None when malformed."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


class _RefusedURL(Exception):
    """A request (or a redirect) to a URL whose scheme the caller does not allow."""


def _check_scheme(url: str, allowed: Sequence[str], what: str) -> None:
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in allowed:
        raise _RefusedURL(f"{what} uses the scheme {scheme + ':' if scheme else '(none)'}, which is not allowed "
                          f"(only {', '.join(s + ':' for s in allowed)}); not opened")


class _NoCrossHostAuthRedirect(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to the allowed schemes, and never carries the Authorization header
    to another host."""

    def __init__(self, allowed_schemes: Sequence[str] = WEB_SCHEMES) -> None:
        super().__init__()
        self.allowed_schemes = tuple(allowed_schemes)

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("location") or headers.get("uri")
        if location:  # checked here: urllib itself refuses some schemes only with an unclear HTTP error
            newurl = urllib.parse.urljoin(req.full_url, location)
            try:
                _check_scheme(newurl, self.allowed_schemes, f"a redirect (HTTP {code}) to {newurl}")
            except _RefusedURL:
                fp.close()
                raise
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        _check_scheme(newurl, self.allowed_schemes, f"a redirect (HTTP {code}) to {newurl}")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            for key in list(new.headers):
                if key.lower() == "authorization":
                    del new.headers[key]
            new.unredirected_hdrs.pop("Authorization", None)
        return new


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _opener(url: str, allowed_schemes: Sequence[str] = WEB_SCHEMES):
    """urllib opener: environment proxies except for loopback hosts, safe redirects."""
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers = [_NoCrossHostAuthRedirect(allowed_schemes)]
    if host in _LOOPBACK:
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


class HTTPFailure(Exception):
    """A request failed for good (after its retries). ``status`` is None for network errors."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


@dataclass
class RetryPolicy:
    """How often and how long to wait before retrying (see the module docstring)."""

    max_rate_retries: int = 6
    rate_base_s: float = 2.0
    max_server_retries: int = 3
    server_base_s: float = 1.0
    max_sleep_s: float = 120.0
    scale: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The numbers of the policy (what a run records; ``sleep`` is left out)."""
        return {"max_rate_retries": self.max_rate_retries, "rate_base_s": self.rate_base_s,
                "max_server_retries": self.max_server_retries, "server_base_s": self.server_base_s,
                "max_sleep_s": self.max_sleep_s, "scale": self.scale}

    def rate_delay(self, attempt: int, retry_after: float | None = None) -> float:
        delay = self.rate_base_s * (2**attempt)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_sleep_s)

    def server_delay(self, attempt: int) -> float:
        return min(self.server_base_s * (attempt + 1), self.max_sleep_s)

    def wait(self, seconds: float) -> None:
        if seconds > 0 and self.scale > 0:
            self.sleep(seconds * self.scale)


class HTTPClient:
    """GET/POST with retries; ``secrets`` are redacted from every error message.

    Args:
        timeout_s: socket timeout of one attempt.
        retry: the :class:`RetryPolicy`.
        user_agent: the User-Agent header.
        secrets: strings that must never appear in a message (tokens).
    """

    def __init__(self, *, timeout_s: float = 60.0, retry: RetryPolicy | None = None,
                 user_agent: str = "geofidelity-bench", secrets: Sequence[str] = ()) -> None:
        self.timeout_s = float(timeout_s)
        self.retry = retry or RetryPolicy()
        self.user_agent = user_agent
        self.secrets = [s for s in secrets if s]
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries_429": 0, "retries_server": 0}

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def redact(self, text: Any) -> str:
        return redact(text, self.secrets)

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        retry_on: Sequence[int] = (429, 500, 502, 503, 504),
        validate: Callable[[bytes], str | None] | None = None,
        max_server_retries: int | None = None,
        allowed_schemes: Sequence[str] = WEB_SCHEMES,
    ) -> bytes:
        """The response body of a successful request.

        ``allowed_schemes``: the schemes ``url`` and every redirect may use (default http and
        https); any other is refused at once, without a retry and without opening anything.

        Raises:
            HTTPFailure: a non-retryable status, a refused scheme, or retries exhausted; the message
                is redacted.
        """
        allowed = tuple(s.lower() for s in allowed_schemes)
        try:
            _check_scheme(url, allowed, "the URL")
        except _RefusedURL as err:
            raise HTTPFailure(self.redact(f"{method.upper()} {url} refused: {err}"), None, 0) from None
        if params:
            sep = "&" if urllib.parse.urlsplit(url).query else "?"
            url = url + sep + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        data = urllib.parse.urlencode(form).encode("utf-8") if form is not None else None
        hdrs = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
        if data is not None:
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        hdrs.update(headers or {})
        server_budget = self.retry.max_server_retries if max_server_retries is None else max_server_retries
        rate_attempt = server_attempt = 0
        attempts = 0
        while True:
            attempts += 1
            self._count("requests")
            status: int | None = None
            retry_after: float | None = None
            try:
                req = urllib.request.Request(url, data=data, headers=hdrs, method=method.upper())
                with _opener(url, allowed).open(req, timeout=self.timeout_s) as resp:
                    body = resp.read()
                reason = validate(body) if validate is not None else None
                if reason is None:
                    return body
                problem = f"invalid answer: {reason}"
            except _RefusedURL as err:
                raise HTTPFailure(self.redact(f"{method.upper()} {url} refused: {err}"), None, attempts) from None
            except urllib.error.HTTPError as err:
                status = err.code
                retry_after = _retry_after(err.headers.get("Retry-After") if err.headers else None)
                try:
                    excerpt = err.read(300).decode("utf-8", "replace")
                except Exception:  # noqa: BLE001 - the body is only decoration for the message
                    excerpt = ""
                finally:
                    err.close()
                problem = f"HTTP {status}" + (f": {' '.join(excerpt.split())[:200]}" if excerpt.strip() else "")
                if status not in retry_on:
                    raise HTTPFailure(self.redact(f"{method.upper()} {url} failed: {problem}"), status, attempts) from None
            except (urllib.error.URLError, http.client.HTTPException, socket.timeout, TimeoutError,
                    ConnectionError, OSError) as err:
                reason_obj = getattr(err, "reason", err)
                problem = f"{type(err).__name__}: {reason_obj}"
            if status == 429:
                if rate_attempt >= self.retry.max_rate_retries:
                    raise HTTPFailure(self.redact(f"{method.upper()} {url} still rate limited (HTTP 429) after "
                                                  f"{attempts} attempts"), status, attempts)
                self._count("retries_429")
                self.retry.wait(self.retry.rate_delay(rate_attempt, retry_after))
                rate_attempt += 1
                continue
            if server_attempt >= server_budget:
                raise HTTPFailure(self.redact(f"{method.upper()} {url} failed after {attempts} attempts: {problem}"),
                                  status, attempts)
            self._count("retries_server")
            self.retry.wait(self.retry.server_delay(server_attempt))
            server_attempt += 1

    def get_json(self, url: str, **kw: Any) -> Any:
        body = self.request("GET", url, validate=_json_validate, **kw)
        return json.loads(body)


def _json_validate(body: bytes) -> str | None:
    try:
        json.loads(body)
    except ValueError:
        return "answer is not JSON"
    return None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
