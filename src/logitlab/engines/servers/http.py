"""JSON over HTTP to an inference server, with timeouts, retries and a request count.

The ``openai`` engine and its scoring modes talk to a server only through
:class:`ServerClient`: ``POST``/``GET`` of JSON, under the OpenAI base URL
(``http://HOST:PORT/v1``) or under the server's root (llama-server's
``/completion``, SGLang's and TGI's ``/generate``).

A request times out after ``timeout`` s and is retried ``retries`` times on
connection errors, timeouts, 408/429 and 5xx, waiting ``backoff`` s, doubled
each time, or what the answer's ``Retry-After`` header asks when that is
longer (delay-seconds or an HTTP-date, RFC 9110 §10.2.3; capped at
:data:`MAX_RETRY_AFTER` s). Every retry is kept in
:attr:`ServerClient.retried` (the engine reports them per run), and a
request's time is that of its answered attempt (the failed attempts and the
waits are not the server's speed). Only the standard library is used.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import parsedate_to_datetime
from typing import Any

from logitlab.errors import EngineError

__all__ = ["HttpStatusError", "ServerClient", "MAX_RETRY_AFTER", "retry_after_seconds"]

#: Longest wait (s) a ``Retry-After`` header can ask for before a retry; longer asks wait this long.
MAX_RETRY_AFTER = 60.0


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header value asks for, in seconds (RFC 9110 §10.2.3).

    Args:
        value: the header value: delay-seconds (``"120"``) or an HTTP-date
            (``"Wed, 21 Oct 2015 07:28:00 GMT"``); None when there is no header.
        now: the current time (s since the epoch) for an HTTP-date; default ``time.time()``.

    Returns:
        Seconds >= 0 (a date in the past is 0), or None when the value is absent or neither form.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:  # RFC 9110 dates are GMT; a date without a zone is not one
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class HttpStatusError(EngineError):
    """The server answered with an HTTP error status that is not worth retrying (4xx), or one that persisted."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ServerClient:
    """One server: its OpenAI base URL, its root, and how requests are sent.

    Args:
        url: the OpenAI base URL, ``http://HOST:PORT/v1`` (a trailing ``/v1`` is
            stripped to get :attr:`root`).
        timeout: seconds per request.
        retries: retries of a failed request (see the module docstring).
        backoff: first retry delay in s, doubled per retry.
        api_key: sent as ``Authorization: Bearer …`` when given.

    Attributes:
        requests: requests sent so far (retries count once each).
        retried: every retry so far, in order: ``{"request": "POST /v1/completions", "failure": "HTTP 429: …",
            "attempt": 2, "waited_s": 0.5}`` (``attempt``: the retry's attempt number, from 2), with
            ``"retry_after_s"`` when the failed answer had a ``Retry-After`` header (the wait it asked for).
    """

    def __init__(self, url: str, *, timeout: float = 120.0, retries: int = 3, backoff: float = 0.5,
                 api_key: str | None = None):
        self.url = url.rstrip("/")
        self.root = re.sub(r"/v1$", "", self.url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.api_key = api_key
        self.requests = 0
        self.retried: list[dict[str, Any]] = []

    def request(self, method: str, url: str, body: dict | None, retries: int | None = None) -> Any:
        """One JSON request with retries; returns the decoded JSON (an object, or a list for TGI's /tokenize).

        Raises:
            HttpStatusError: a 4xx answer (not retried), or a 408/429/5xx answer after the retries.
            EngineError: no answer after the retries, or an answer that is not JSON.
        """
        return self._request(method, url, body, retries)[0]

    def _request(self, method: str, url: str, body: dict | None, retries: int | None) -> tuple[Any, float]:
        """:meth:`request`, and the wall time (s) of the attempt that was answered."""
        retries = self.retries if retries is None else retries
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = "no attempt"
        asked: float | None = None  # Retry-After of the last failed answer (s)
        path = urllib.parse.urlsplit(url).path or "/"
        for attempt in range(retries + 1):
            if attempt:
                wait = self.backoff * 2 ** (attempt - 1)
                entry: dict[str, Any] = {"request": f"{method} {path}", "failure": last, "attempt": attempt + 1}
                if asked is not None:
                    entry["retry_after_s"] = asked
                    wait = max(wait, min(asked, MAX_RETRY_AFTER))
                entry["waited_s"] = wait
                self.retried.append(entry)
                time.sleep(wait)
                asked = None
            self.requests += 1
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace").strip().replace("\n", " ")
                last = f"HTTP {exc.code}: {detail}"
                asked = retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
                if (exc.code in (408, 429) or exc.code >= 500) and attempt < retries:
                    continue
                tries = f" on all {attempt + 1} attempts" if attempt else ""
                raise HttpStatusError(f"{method} {url} answered HTTP {exc.code}{tries}: {detail}", exc.code) from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError,
                    http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
                continue
            seconds = time.perf_counter() - start
            try:
                return json.loads(raw), seconds
            except ValueError:
                raise EngineError(f"{method} {url} answered something that is not JSON: {raw[:120]!r}") from None
        raise EngineError(f"openai server {url} did not answer after {retries + 1} attempt(s) "
                          f"(timeout {self.timeout:g} s each): {last}")

    def post(self, path: str, body: dict, *, root: bool = False, retries: int | None = None) -> tuple[dict, float]:
        """POST ``body`` to ``{url}{path}`` (``root``: ``{root}{path}``); the answer (an object) and the wall time (s)
        of the attempt that was answered (HTTP included; failed attempts and retry waits left out).

        Raises:
            EngineError: as :meth:`request`, or the answer is not a JSON object.
        """
        url = (self.root if root else self.url) + path
        data, seconds = self._request("POST", url, body, retries)
        if not isinstance(data, dict):
            raise EngineError(f"POST {url} answered JSON that is not an object: {str(data)[:120]}")
        return data, seconds

    def get(self, path: str, *, root: bool = False, retries: int | None = None) -> dict:
        """GET ``{url}{path}`` (``root``: ``{root}{path}``); the decoded answer, which must be a JSON object."""
        url = (self.root if root else self.url) + path
        data = self.request("GET", url, None, retries)
        if not isinstance(data, dict):
            raise EngineError(f"GET {url} answered JSON that is not an object: {str(data)[:120]}")
        return data
