#!/usr/bin/env python3
"""A complete callsheet harness-tool worker in Python, standard library only.

It registers two tools of a toy shop with a callsheet node and serves their
calls (docs/workers.md):

  lookup_order  read_only, safe, parallel_safe: look an order up
  charge        side_effecting, never: charge an order (takes delay_ms, as
                a slow payment API would), with a 2 s heartbeat_timeout

callsheet validates every call's arguments against the schema before a
worker sees it, runs permission, scheduling and claims, and commits results
in call order; the worker only runs what it is handed. Copy this file and
replace the TOOLS table with your own.

Environment: CALLSHEET_URL (default http://127.0.0.1:7700), CALLSHEET_TOKEN
(the tenant's bearer token, if the node has tenants), WORKER_ID,
WORKER_CONCURRENCY (default 4). SIGTERM or Ctrl-C stops polling; running
tasks finish first.
"""

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

BASE = os.environ.get("CALLSHEET_URL", "http://127.0.0.1:7700").rstrip("/")
TOKEN = os.environ.get("CALLSHEET_TOKEN", "")
WORKER = os.environ.get("WORKER_ID", "py-%d" % os.getpid())
CONCURRENCY = int(os.environ.get("WORKER_CONCURRENCY", "4"))
WAIT_MS = 30000  # how long one poll is held when no task is there (at most 60000)


def api(method, path, body=None, timeout=WAIT_MS / 1000 + 15):
    """One JSON request; returns (status, decoded answer or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if TOKEN:
        req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"error": {"code": "http", "message": raw.decode(errors="replace")}}


class Permanent(Exception):
    """A failure retrying cannot fix: the attempt fails with permanent: true."""


ORDERS = {"A-1": "shipped", "B-2": "packing", "C-3": "delivered"}


def lookup_order(task, args, cancelled):
    status = ORDERS.get(args["order"])
    if status is None:
        raise Permanent("no order %s" % args["order"])
    return [{"type": "json", "json": {"order": args["order"], "status": status,
                                      "idempotency_key": task["idempotency_key"]}}]


def charge(task, args, cancelled):
    # A real worker passes the idempotency key to the payment API, so a
    # charge it may already have made is not made twice.
    if cancelled.wait(args.get("delay_ms", 0) / 1000):
        raise Exception("cancelled before the charge was made")
    return [{"type": "text", "text": "charged %s %d cents (key %s)" % (args["order"], args["cents"], task["idempotency_key"])}]


TOOLS = {
    "lookup_order": {
        "spec": {
            "description": "Look an order of the shop up by its id and say its status.",
            "guidelines": ["Use to answer questions about an order's status."],
            "input_schema": {"type": "object", "properties": {"order": {"type": "string", "description": "order id, such as A-1"}},
                             "required": ["order"], "additionalProperties": False},
            "effect": "read_only", "replay": "safe", "concurrency": "parallel_safe", "timeout": "10s",
        },
        "run": lookup_order,
    },
    "charge": {
        "spec": {
            "description": "Charge an order to the customer's card.",
            "guidelines": ["Use only when the user asked to pay for an order."],
            "input_schema": {"type": "object", "properties": {
                "order": {"type": "string"}, "cents": {"type": "integer", "minimum": 1},
                "delay_ms": {"type": "integer", "minimum": 0}},
                "required": ["order", "cents"], "additionalProperties": False},
            "timeout": "60s", "heartbeat_timeout": "2s",  # side_effecting, never, exclusive: left out, strictest
        },
        "run": charge,
    },
}


def heartbeat(task, cancelled, done):
    """Heartbeats while the task runs; sets cancelled when the node says so."""
    every = task.get("heartbeat_timeout_ms", 15000) / 3000
    while not done.wait(every):
        status, answer = api("POST", "/v1/tasks/%s/heartbeat" % task["task"], {}, timeout=10)
        if status == 409 or (status == 200 and answer.get("cancel")):
            cancelled.set()  # settled or cancelled: what we do no longer counts
            return


# A finished task whose worker has no poll out answers with "next": the body
# of a poll, so the node hands over the answer and holds the request as that
# poll, and the next task comes in the answer (docs/workers.md). polls counts
# this worker's polls out; use_next turns off on a node older than "next",
# and once the worker is stopping.
lock = threading.Lock()
state = {"polls": 0, "use_next": True}


def poll_body(slots_free):
    return {"worker": WORKER, "tools": list(TOOLS), "max": slots_free, "wait_ms": WAIT_MS}


def take_free(slots, most):
    """Takes up to most more free slots without waiting; returns how many."""
    n = 0
    while n < most and slots.acquire(blocking=False):
        n += 1
    return n


def run(task):
    """Runs one task; returns the answer's path and body."""
    print("took tool=%s call=%s attempt=%d key=%s" % (task["tool"], task["call"], task["attempt"], task["idempotency_key"]), flush=True)
    cancelled, done = threading.Event(), threading.Event()
    threading.Thread(target=heartbeat, args=(task, cancelled, done), daemon=True).start()
    try:
        return "complete", {"content": TOOLS[task["tool"]]["run"](task, task["arguments"], cancelled)}
    except Permanent as e:
        return "fail", {"error": str(e), "permanent": True}
    except Exception as e:  # the model reads the message
        return "fail", {"error": "%s: %s" % (type(e).__name__, e)}
    finally:
        done.set()


def answer(task, path, body, slots):
    """Posts a task's answer, with "next" when no poll of this worker is out;
    returns the tasks that came with it, holding a slot for each (this
    thread's own among them), and gives back the slots it took for none."""
    with lock:
        ask = state["use_next"] and state["polls"] == 0
        if ask:
            state["polls"] += 1
    url = "/v1/tasks/%s/%s" % (task["task"], path)
    if not ask:
        status, got = api("POST", url, body, timeout=30)
        if status != 200:
            print("answer for call %s refused: %d %s" % (task["call"], status, got), file=sys.stderr, flush=True)
        return []
    extra = take_free(slots, CONCURRENCY - 1)
    try:
        status, got = api("POST", url, dict(body, next=poll_body(1 + extra)))
    except OSError:  # the exchange failed before the node answered
        status, got = 0, None
    finally:
        with lock:
            state["polls"] -= 1
    tasks = []
    if status == 200:
        tasks = got.get("tasks", [])
        if got.get("next_error"):
            print("next: %s" % got["next_error"], file=sys.stderr, flush=True)
    elif status == 400 and "next" in json.dumps(got):
        with lock:
            state["use_next"] = False  # a node older than "next"
    if status in (0, 400):  # nothing was handed over: answer plainly
        status, got = api("POST", url, body, timeout=30)
    if status != 200:
        print("answer for call %s refused: %d %s" % (task["call"], status, got), file=sys.stderr, flush=True)
    for _ in range(1 + extra - len(tasks)):
        slots.release()
    return tasks


def serve(task, slots):
    """Runs task in the slot it holds, then each next task that comes in
    the answer; the slot goes back with the last."""
    while task is not None:
        path, body = run(task)
        tasks = answer(task, path, body, slots)
        for more in tasks[1:]:
            threading.Thread(target=serve, args=(more, slots)).start()
        task = tasks[0] if tasks else None


def main():
    for name, tool in TOOLS.items():
        status, answer = api("PUT", "/v1/tools/" + name, tool["spec"], timeout=30)
        if status != 200:
            sys.exit("registering %s: %d %s" % (name, status, answer))
    print("registered %s as worker %s" % (", ".join(TOOLS), WORKER), flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)

    slots = threading.BoundedSemaphore(CONCURRENCY)
    threads = []
    backoff = 0.1
    try:
        while True:
            slots.acquire()
            free = 1
            while free < CONCURRENCY and slots.acquire(blocking=False):
                free += 1
            with lock:
                state["polls"] += 1
            try:
                status, got = api("POST", "/v1/workers/poll", poll_body(free))
            except OSError as e:  # the node is restarting, or unreachable
                status, got = 0, {"error": {"message": str(e)}}
            finally:
                with lock:
                    state["polls"] -= 1
            tasks = got["tasks"] if status == 200 else []
            for _ in range(free - len(tasks)):
                slots.release()
            if status not in (200, 204):
                print("poll: %d %s" % (status, got), file=sys.stderr, flush=True)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5)
                continue
            backoff = 0.1
            for task in tasks:
                t = threading.Thread(target=serve, args=(task, slots))
                t.start()
                threads.append(t)
            threads = [t for t in threads if t.is_alive()]
    except KeyboardInterrupt:
        with lock:
            state["use_next"] = False
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
