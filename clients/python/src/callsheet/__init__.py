"""Client of a callsheet node's HTTP API (docs/spec.md section 8).

    import callsheet
    client = callsheet.Client("http://127.0.0.1:7700", token=None)
    session = client.open_session()
    answer = session.turn([{"id": "call_1", "name": "read", "arguments": {"path": "README.md"}}])
    answer["results"][0]["outcome"]  # "ok"

Standard library only; Python 3.9 or newer. A turn's id is minted before its
first attempt, so a post that meets a 503 (a fleet's takeover answers one
with Retry-After), a 429 with Retry-After or a dropped connection is sent
again with the same id, for up to ``retry_for`` seconds (30) after the first
failure: the node answers a repeated turn id from its record and runs
nothing twice. Errors the API answers raise CallsheetError with its
code. A streamed turn (Session.open_turn) posts each call as the model
completes it, so it starts while the model still streams.
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["Client", "Session", "StreamedTurn", "CallsheetError", "new_turn_id", "FORMATS"]

#: The provider formats a turn may be posted and answered in.
FORMATS = ("openai_chat", "openai_responses", "anthropic")

DEFAULT_URL = "http://127.0.0.1:7700"


class CallsheetError(Exception):
    """An answer of the API that is not a success.

    ``status`` is the HTTP status, ``code`` the API's error code (such as
    ``"turn_id_reused"`` or ``"no_tool_calls"``), ``message`` what it said,
    ``retry_after`` the seconds its Retry-After header asked to wait (None
    without one).
    """

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__("callsheet: %s (%d): %s" % (code, status, message))
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def retryable(self) -> bool:
        """Whether the answer says to come back: a 503 (a node answers it
        before it acts, and during a takeover), or a 429 that names when (a
        limit that waiting does not lift names no Retry-After)."""
        return self.status == 503 or (self.status == 429 and self.retry_after is not None)

    def gateway(self) -> bool:
        """Whether a proxy in front of the node answered that its upstream
        failed (502, 504): the request may or may not have reached the
        node, as with a dropped connection, so it is sent again only where
        a drop would be."""
        return self.status in (502, 504)


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds a Retry-After header asks to wait: delay-seconds or an
    HTTP-date (RFC 9110 section 10.2.3); None when absent or unreadable."""
    if value is None:
        return None
    v = value.strip()
    if re.fullmatch(r"[0-9]{1,9}", v):
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


class _Retry:
    """One request's retries: for ``retry_for`` seconds after its first
    failure, at most ``retries`` times (None: no cap), waiting what the
    answer's Retry-After says (and up to a tenth more), else ``backoff``
    doubling to ``max_backoff``, jittered down by up to half, so that
    clients refused together do not come back together."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.first: Optional[float] = None
        self.tries = 0
        self.next = client.backoff

    def wait(self, retry_after: Optional[float] = None) -> bool:
        """Sleeps before the next try and returns True, or returns False
        once the budget is spent or the wait would end past it."""
        c = self.client
        now = time.monotonic()
        if self.first is None:
            self.first = now
        if c.retries is not None and self.tries >= c.retries:
            return False
        if retry_after is not None:
            d = max(retry_after, c.backoff)
            d += random.uniform(0, d / 10)
        else:
            d = self.next / 2 + random.uniform(0, self.next / 2)
            self.next = min(2 * self.next, c.max_backoff)
        if now + d > self.first + c.retry_for:
            return False
        self.tries += 1
        time.sleep(d)
        return True

    def progressed(self) -> None:
        """Starts the budget afresh: the request got somewhere (an event
        stream yielded events) before it failed again."""
        self.first, self.tries, self.next = None, 0, self.client.backoff


def new_turn_id() -> str:
    """A fresh turn id, for a caller that wants to know it before posting."""
    return "turn_" + uuid.uuid4().hex


# What a dropped connection looks like to urllib and http.client.
_DROPS = (http.client.HTTPException, ConnectionError, TimeoutError)


class Client:
    """A client of one node (or of a load balancer in front of a fleet).

    A request that may be sent again (a turn with its id, a read, a streamed
    turn's batch) is, after a 503, a 429 with Retry-After or a dropped
    connection, for ``retry_for`` seconds after its first failure (0: never),
    waiting what Retry-After says, else ``backoff`` seconds doubling to
    ``max_backoff``, jittered; ``retries`` caps how many times (None: no
    cap). ``timeout`` bounds each request (None: a turn waits for its calls
    however long they take).
    """

    def __init__(self, url: str = DEFAULT_URL, token: Optional[str] = None, *,
                 retry_for: float = 30.0, backoff: float = 0.2, max_backoff: float = 5.0,
                 retries: Optional[int] = None, timeout: Optional[float] = None) -> None:
        if retry_for < 0 or backoff <= 0 or max_backoff < backoff or (retries is not None and retries < 0):
            raise ValueError("retry_for=%r, backoff=%r, max_backoff=%r, retries=%r: want retry_for >= 0, "
                             "0 < backoff <= max_backoff, retries None or >= 0" % (retry_for, backoff, max_backoff, retries))
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("url %r: want http://host:port" % (url,))
        self.url = url.rstrip("/")
        self.token = token
        self.retry_for = retry_for
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.retries = retries
        self.timeout = timeout

    # -- transport --------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None,
                 headers: Optional[Dict[str, str]] = None, stream: bool = False):
        data = None
        h = {"Accept": "application/json"}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raise _api_error(e.code, e.read(), e.headers.get("Retry-After")) from None
        if stream:
            return resp
        with resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw.strip() else None)

    def _call(self, method: str, path: str, body: Any = None, drops: bool = True) -> Any:
        """Sends a request, again on a 503, a 429 with Retry-After or (with
        drops, for an idempotent one) a dropped connection or a proxy's 502
        or 504; returns the decoded answer."""
        retry = _Retry(self)
        while True:
            try:
                return self._request(method, path, body)[1]
            except CallsheetError as e:
                if not (e.retryable() or drops and e.gateway()) or not retry.wait(e.retry_after):
                    raise
            except urllib.error.URLError as e:
                if not drops or not isinstance(e.reason, (ConnectionError, OSError)) or not retry.wait():
                    raise
            except _DROPS:
                if not drops or not retry.wait():
                    raise

    # -- the API ----------------------------------------------------------

    def open_session(self, workspace: Optional[str] = None, agent: Optional[str] = None) -> "Session":
        """Opens a session (not retried: a repeat would open a second one)."""
        body = {}
        if workspace:
            body["workspace"] = workspace
        if agent:
            body["agent"] = agent
        _, s = self._request("POST", "/v1/sessions", body)
        return Session(self, s["session"], s.get("workspace"))

    def session(self, id: str) -> "Session":
        """The session with ``id``, opened earlier."""
        return Session(self, id)

    def tools(self, format: str = "openai", agent: Optional[str] = None, strict: Optional[bool] = None) -> Dict[str, Any]:
        """GET /v1/tools: ``{"format", "tools", "system"?}``, the tool
        definitions to give the model in ``format`` (openai,
        openai_responses, anthropic)."""
        q = {"format": format}
        if agent:
            q["agent"] = agent
        if strict is not None:
            q["strict"] = "true" if strict else "false"
        return self._call("GET", "/v1/tools?" + urllib.parse.urlencode(q))


def _api_error(status: int, raw: bytes, retry_after: Optional[str] = None) -> CallsheetError:
    wait = _retry_after(retry_after)
    try:
        e = json.loads(raw)["error"]
        return CallsheetError(status, e["code"], e["message"], wait)
    except (ValueError, KeyError, TypeError):
        return CallsheetError(status, "http", raw.decode("utf-8", "replace").strip(), wait)


def _has_response_id(format: str, response: Any) -> bool:
    """Whether the node reads a turn id from the body: the id of a whole
    response (a Chat Completion has "choices")."""
    if not isinstance(response, dict):
        return False
    if format in ("openai_chat", "openai") and "choices" not in response:
        return False
    return isinstance(response.get("id"), str) and response["id"] != ""


class Session:
    """One session of a node. ``id`` is its id, ``workspace`` its workspace
    (set by Client.open_session)."""

    def __init__(self, client: Client, id: str, workspace: Optional[str] = None) -> None:
        self.client = client
        self.id = id
        self.workspace = workspace

    def _path(self, *parts: str) -> str:
        return "/v1/sessions/" + "/".join(urllib.parse.quote(p, safe="") for p in (self.id,) + parts)

    def turn(self, calls: List[Dict[str, Any]], id: Optional[str] = None, wait: bool = True) -> Dict[str, Any]:
        """Posts ``calls`` (``[{"id", "name", "arguments"}]``) as one turn and
        returns its answer: ``{"turn", "status": "complete", "results",
        "notices"}``, or ``{"turn", "status": "running"}`` with
        ``wait=False``. ``id`` is the turn's idempotency key; one is minted
        when left out, before the first attempt."""
        body = {"id": id or new_turn_id(), "calls": calls}
        return self.client._call("POST", self._path("turns") + ("" if wait else "?wait=0"), body)

    def turn_native(self, response: Any, format: str, turn: Optional[str] = None, wait: bool = True) -> Dict[str, Any]:
        """Posts a model response in a provider's ``format`` (openai_chat,
        openai_responses, anthropic) as a turn and returns the answer in that
        provider's shape: ``{"turn", "messages"}``, ``{"turn", "input"}`` or
        ``{"turn", "message"}``, which the harness appends to its
        conversation; a running turn answers ``{"turn", "status":
        "running", "waiting"}``. ``response`` is the whole response or its
        assistant part, as a dict/list (an SDK object's ``model_dump()``) or
        JSON bytes. A whole response's id is the turn id; for a part, ``turn``
        names it, or one is minted before the first attempt."""
        q = {"format": format}
        body = response if isinstance(response, bytes) else json.dumps(response).encode()
        if turn is None and not _has_response_id(format, json.loads(body)):
            turn = new_turn_id()
        if turn is not None:
            q["turn"] = turn
        if not wait:
            q["wait"] = "0"
        return self.client._call("POST", self._path("turns") + "?" + urllib.parse.urlencode(q), body)

    def open_turn(self, calls: Any, id: Optional[str] = None, format: Optional[str] = None,
                  parallel_tool_calls: Optional[bool] = None, cap: Optional[int] = None) -> "StreamedTurn":
        """Opens a streamed turn with its first calls and returns it: post
        each next call with ``add`` as the model completes it, then ``end``.
        A call starts on the node as soon as the schedule allows, not once
        the response is whole. ``calls`` is ``[{"id", "name", "arguments"}]``,
        or with ``format`` (openai_chat, openai_responses, anthropic) a piece
        of the provider's stream: a Chat tool call whose arguments are whole
        (or a list of them), a Responses ``function_call`` item (or the
        ``response.output_item.done`` event carrying it), an Anthropic
        ``tool_use`` block whose input is whole. ``id`` is the turn's id (the
        response id the stream's first event carries, so a harness that
        restarts posts to the same turn); one is minted when left out.
        ``parallel_tool_calls`` and ``cap`` set the turn's scheduling."""
        t = StreamedTurn(self, id or new_turn_id(), format)
        t._post(calls, parallel_tool_calls, cap)
        return t

    def get_turn(self, id: str, format: Optional[str] = None) -> Dict[str, Any]:
        """A turn posted before, complete or running; in a provider's shape
        with ``format``."""
        q = "?format=" + urllib.parse.quote(format) if format else ""
        return self.client._call("GET", self._path("turns", id) + q)

    def events(self, after: int = 0, follow: bool = True) -> Iterator[Dict[str, Any]]:
        """Yields the session's events after sequence ``after``, in order.
        With ``follow`` it stays live, and when the connection drops it
        reconnects with Last-Event-ID, the last sequence it yielded, so
        nothing is missed or seen twice; without, it yields what is recorded
        and stops."""
        last = after
        retry = _Retry(self.client)
        while True:
            try:
                resp = self.client._request("GET", self._path("events") + "?follow=" + ("true" if follow else "false"),
                                            headers={"Accept": "text/event-stream", "Last-Event-ID": str(last)}, stream=True)
                with resp:
                    data = []
                    while True:
                        line = resp.readline()
                        if not line:
                            break
                        line = line.decode("utf-8").rstrip("\r\n")
                        if line.startswith("data:"):
                            data.append(line[5:].lstrip(" "))
                        elif line == "" and data:
                            ev = json.loads("\n".join(data))
                            data = []
                            last = ev["seq"]
                            retry.progressed()
                            yield ev
                if not follow:
                    return
                # The answer ended while followed: a drop, with its retry.
                raise ConnectionError("event stream of %s ended" % self.id)
            except CallsheetError as e:
                if not (e.retryable() or e.gateway()) or not retry.wait(e.retry_after):
                    raise
            except (urllib.error.URLError,) + _DROPS:
                if not retry.wait():
                    raise

    def approvals(self) -> List[Dict[str, Any]]:
        """The running turn's calls that wait for approval."""
        return self.client._call("GET", self._path("approvals"))["approvals"]

    def approve(self, call: str, allow: bool = True, reason: Optional[str] = None, scope: Optional[str] = None) -> Dict[str, Any]:
        """Decides a call that waits for approval (allow, or deny with
        ``allow=False``); ``scope`` is call, tool_args or tool."""
        body: Dict[str, Any] = {"decision": "allow" if allow else "deny"}
        if reason:
            body["reason"] = reason
        if scope:
            body["scope"] = scope
        return self.client._call("POST", self._path("approvals", call), body, drops=False)

    def answer(self, call: str, answer: Any) -> Dict[str, Any]:
        """Answers a question call with any JSON value."""
        return self.client._call("POST", self._path("answers", call), {"answer": answer}, drops=False)

    def transcript(self) -> Dict[str, Any]:
        """The session's transcript: every turn's results and notices."""
        return self.client._call("GET", self._path("transcript"))

    def close(self, reason: Optional[str] = None) -> Dict[str, Any]:
        """Closes the session."""
        return self.client._call("POST", self._path("close"), {"reason": reason} if reason else {}, drops=False)


class StreamedTurn:
    """A turn whose calls are posted while the model streams (Session.open_turn).

    ``id`` is the turn's id, ``format`` the provider's format of its pieces
    (None: callsheet's own calls), ``calls`` how many calls were posted,
    ``parallel_tool_calls`` and ``cap`` its scheduling as recorded. Each
    post names where its batch starts and the end how many calls were
    posted, so a post retried after a 503 or a dropped connection is
    answered from the record and a lost batch is refused, never skipped; a
    harness that restarted and streams the same response again under the
    same id has each batch, and the end, answered from the record.
    Not safe for use from several threads: a turn's batches go in order.
    """

    def __init__(self, session: Session, id: str, format: Optional[str] = None) -> None:
        self.session = session
        self.id = id
        self.format = format
        self.calls = 0
        self.parallel_tool_calls: Optional[bool] = None
        self.cap: Optional[int] = None

    def add(self, calls: Any) -> Dict[str, Any]:
        """Posts the next calls (or the provider's next piece) and returns the
        node's answer: ``{"turn", "status": "open", "from", "size", "calls",
        "parallel_tool_calls", "cap"}``."""
        return self._post(calls, None, None)

    def end(self, wait: bool = True) -> Dict[str, Any]:
        """Closes the turn and returns its answer as Session.turn does (in
        the provider's shape with a format, as Session.turn_native does)."""
        q: Dict[str, str] = {}
        if self.format:
            q["format"] = self.format
        if not wait:
            q["wait"] = "0"
        path = self.session._path("turns", self.id, "end") + ("?" + urllib.parse.urlencode(q) if q else "")
        return self.session.client._call("POST", path, {"calls": self.calls})

    def _post(self, calls: Any, parallel_tool_calls: Optional[bool], cap: Optional[int]) -> Dict[str, Any]:
        path = self.session._path("turns", self.id, "calls")
        if self.format:
            q: Dict[str, str] = {"format": self.format, "from": str(self.calls)}
            if parallel_tool_calls is not None:
                q["parallel_tool_calls"] = "true" if parallel_tool_calls else "false"
            if cap is not None:
                q["cap"] = str(cap)
            body: Any = calls if isinstance(calls, bytes) else json.dumps(calls).encode()
            path += "?" + urllib.parse.urlencode(q)
        else:
            body = {"from": self.calls, "calls": calls}
            if parallel_tool_calls is not None:
                body["parallel_tool_calls"] = parallel_tool_calls
            if cap is not None:
                body["cap"] = cap
        a = self.session.client._call("POST", path, body)
        # The next batch starts after this one, which for a turn streamed
        # again (a restarted harness) is not the count the node holds.
        self.calls = a["from"] + a["size"]
        self.parallel_tool_calls = a["parallel_tool_calls"]
        self.cap = a["cap"]
        return a
