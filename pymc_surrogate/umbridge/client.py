"""The HTTP side of ``pymc_surrogate.umbridge``: UM-Bridge's protocol (version 1.0) spoken
with ``requests``, one session per process and thread, transient failures retried, errors
that name the server."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any

__all__ = ["CONNECT_TIMEOUT", "DEFAULT_RETRIES", "RETRY_BACKOFF", "UMBridgeError", "Client"]

#: Seconds to wait for a connection: a server that is up accepts at once.
CONNECT_TIMEOUT: float = 10.0

#: Retries of a request after a transient failure (no connection, no answer within the
#: timeout, HTTP 5xx) when ``model_op`` is given no ``retries``; waits of ``RETRY_BACKOFF``
#: seconds, doubled at each retry, between them.
DEFAULT_RETRIES: int = 2
RETRY_BACKOFF: float = 0.1


class UMBridgeError(RuntimeError):
    """The UM-Bridge server could not be reached, timed out, or refused a request.

    The message names the server's URL, the model and what to do.
    """


def _requests():
    """The ``requests`` package (the ``umbridge`` extra), imported on first use only, or an
    error that names the extra."""
    try:
        import requests
    except ImportError as err:
        raise ImportError(
            "pymc_surrogate.umbridge talks to model servers with the `requests` package, "
            "which is not installed: pip install 'pymc-surrogate[umbridge]'."
        ) from err
    return requests


class Client:
    """Requests to one server: one ``requests.Session`` per process and thread, transient
    failures retried, errors that name the URL."""

    def __init__(self, url: str, name: str, timeout: float | None, retries: int = DEFAULT_RETRIES):
        self.url = url
        self.name = name
        self.timeout = None if timeout is None else (min(CONNECT_TIMEOUT, timeout), timeout)
        self.retries = retries
        self._local = threading.local()

    def _session(self):
        requests = _requests()
        local = self._local
        # A forked worker must not share the parent's pooled sockets.
        if getattr(local, "pid", None) != os.getpid():
            local.session, local.pid, local.failing = requests.Session(), os.getpid(), False
        return local.session

    def get(self, endpoint: str) -> dict:
        return self._request("GET", endpoint, None)

    def post(self, endpoint: str, payload: dict) -> dict:
        return self._request("POST", endpoint, payload)

    def _request(self, method: str, endpoint: str, payload: dict | None) -> dict:
        """One request, sent again up to ``retries`` times after a transient failure; once
        the server has failed every try of a request, later ones get a single try each
        until one is answered."""
        self._session()
        local = self._local
        tries = 1 if local.failing else 1 + self.retries
        for attempt in range(tries):
            if attempt:
                time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
            try:
                answer = self._request_once(method, endpoint, payload)
            except _Transient as err:
                error = err.error
                continue
            local.failing = False
            return answer
        local.failing = True
        if tries > 1:
            error.args = (f"{error.args[0]} ({tries} tries)",)
        raise error

    def _request_once(self, method: str, endpoint: str, payload: dict | None) -> dict:
        requests = _requests()

        where = f"UM-Bridge server at {self.url} (model {self.name!r}, {endpoint})"
        try:
            response = self._session().request(
                method, f"{self.url}/{endpoint}", json=payload, timeout=self.timeout)
        except requests.Timeout as err:
            raise _Transient(UMBridgeError(
                f"No answer from the {where} within {self.timeout[1]} s. If the server is up and "
                "the model is just slow, pass a larger timeout= to model_op (None waits "
                f"forever); otherwise restart the server. ({type(err).__name__})"
            )) from None
        except requests.RequestException as err:
            raise _Transient(UMBridgeError(
                f"Lost the {where}: {type(err).__name__}: {err}. Check that the server is "
                f"running and reachable (curl {self.url}/Info), then sample again."
            )) from None
        answer = _decode(response.text)
        if response.status_code < 500 and isinstance(answer, dict) and "error" in answer:
            error = answer["error"]
            raise UMBridgeError(
                f"The {where} refused the request: {error.get('type')}: {error.get('message')} "
                "Check the inputs and the config= the model was given."
            )
        if not response.ok or not isinstance(answer, dict):
            failure = UMBridgeError(
                f"The {where} answered HTTP {response.status_code} {response.reason!s}: "
                f"{response.text[:200]!r}. The model probably raised on the server: see the "
                "server's output."
            )
            if response.status_code >= 500:
                raise _Transient(failure)
            raise failure
        return answer


class _Transient(Exception):
    """A failure worth another try (no connection, no answer in time, HTTP 5xx)."""

    def __init__(self, error: UMBridgeError):
        super().__init__(str(error))
        self.error = error


# umbridge's Python server prints outputs with Python's repr: nan and inf are not JSON.
_NON_JSON = re.compile(r"(?<![\w.])(-?)(nan|inf)(?![\w.])")


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_NON_JSON.sub(lambda m: "NaN" if m[2] == "nan" else m[1] + "Infinity", text))
    except ValueError:
        return None
