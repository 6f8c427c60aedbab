"""Tests of the callsheet client against a real node.

Run by clients/clients_test.go, which starts the node and a proxy that fails
once in the ways networks do (internal/clienttest) and passes their URLs in
CALLSHEET_URL, CALLSHEET_TOKEN and CALLSHEET_FLAKY_URL.
"""

import ast
import email.utils
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import callsheet

URL = os.environ["CALLSHEET_URL"]
TOKEN = os.environ["CALLSHEET_TOKEN"]
FLAKY = os.environ["CALLSHEET_FLAKY_URL"]
HERE = pathlib.Path(__file__).resolve().parent.parent


def count(session, typ):
    return sum(1 for ev in session.events(follow=False) if ev["type"] == typ)


def until(f, what, seconds=20):
    deadline = time.time() + seconds
    while True:
        v = f()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


HOLD_MS = 5000  # clienttest.Hold


def attempts(id):
    """When the proxy saw each request for turn ``id``, in ms after the first."""
    with urllib.request.urlopen(FLAKY + "/clienttest/attempts/" + id) as r:
        return json.load(r)["attempts"]


class ClientTest(unittest.TestCase):
    def client(self, url=URL):
        return callsheet.Client(url, token=TOKEN, backoff=0.05, max_backoff=1.0)

    def check_attempts(self, id):
        """The requests for ``id`` came again no sooner than Retry-After (1 s;
        1-2 s as a date) said, and reached past the hold."""
        at = attempts(id)
        self.assertGreaterEqual(len(at), 2, "%s: requests at %s ms, want a retry" % (id, at))
        for a, b in zip(at, at[1:]):
            if a < HOLD_MS:
                self.assertGreaterEqual(b - a, 900, "%s: requests at %s ms: sent again sooner than Retry-After" % (id, at))
        if id.startswith("moving-"):
            self.assertGreaterEqual(at[-1], HOLD_MS, "%s: requests at %s ms: none after the hold" % (id, at))

    def test_rides_out_a_takeover_honouring_retry_after(self):
        # The proxy answers each "moving-" turn 503 with Retry-After for 5 s,
        # as a fleet node answers a call that meets a takeover: a client with
        # the default budget waits it out.
        c = callsheet.Client(FLAKY, token=TOKEN)
        posted, streamed, read, limited = (c.open_session() for _ in range(4))

        def write(id):
            return [{"id": "w", "name": "write", "arguments": {"path": id + ".txt", "content": "x"}}]

        self.client().session(read.id).turn(write("moving-date-py"), id="moving-date-py")
        errors = []

        def run(f):
            try:
                f()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def stream():
            streamed.open_turn(write("moving-stream-py"), id="moving-stream-py").end()

        def get():
            self.assertEqual(read.get_turn("moving-date-py")["status"], "complete")

        threads = [threading.Thread(target=run, args=(f,)) for f in (
            lambda: posted.turn(write("moving-py"), id="moving-py"), stream, get,
            lambda: limited.turn(write("limited-py"), id="limited-py"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for s in (posted, streamed, read, limited):
            self.assertEqual(count(s, "ToolCallStarted"), 1, "each call ran once")
        for id in ("moving-py", "moving-stream-py", "moving-date-py", "limited-py"):
            self.check_attempts(id)

        # A budget shorter than the takeover gives the node's answer.
        short = callsheet.Client(FLAKY, token=TOKEN, retry_for=2.0).session(posted.id)
        with self.assertRaises(callsheet.CallsheetError) as e:
            short.turn(write("moving-short-py"), id="moving-short-py")
        self.assertEqual((e.exception.status, e.exception.code), (503, "unavailable"))
        self.assertIn("moving to another node", e.exception.message)
        self.assertIn(len(attempts("moving-short-py")), (2, 3))
        # Opening a session has no id: a 503 is not sent again (the proxy's
        # second answer would be a session).
        with self.assertRaises(callsheet.CallsheetError) as e:
            c.open_session(workspace="busy-open-py")
        self.assertEqual(e.exception.status, 503)

    def test_readme_example(self):
        text = (HERE / "README.md").read_text()
        m = re.search(r"## A first turn.*?```python\n(.*?)```.*?prints\n\n```(?:text)?\n(.*?)```", text, re.S)
        self.assertIsNotNone(m, "README.md has no first-turn example")
        env = dict(os.environ, PYTHONPATH=str(HERE / "src"))
        out = subprocess.run([sys.executable, "-c", m.group(1)], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, m.group(2))
        print("README example printed:\n" + out.stdout, file=sys.stderr)

    def test_retry_after_forms(self):
        now = time.time()
        self.assertEqual(callsheet._retry_after(" 2 "), 2.0)
        self.assertAlmostEqual(callsheet._retry_after(email.utils.formatdate(now + 3, usegmt=True)), 3, delta=1.1)
        self.assertEqual(callsheet._retry_after(email.utils.formatdate(now - 60, usegmt=True)), 0.0)
        for bad in ("", "-1", "1.5", "soon", "\u00b2", "Wed, 99 Foo"):
            self.assertIsNone(callsheet._retry_after(bad), bad)

    def test_python39_syntax(self):
        for path in (HERE / "src" / "callsheet").glob("*.py"):
            ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))

    def test_retries_same_turn_id_after_drop_503_and_502(self):
        s = self.client(FLAKY).open_session()
        for id in ("drop-py", "busy-py", "gateway-py"):
            a = s.turn([{"id": "w", "name": "write", "arguments": {"path": id + ".txt", "content": "x"}}], id=id)
            self.assertEqual(a["turn"], id)
            self.assertEqual(a["results"][0]["outcome"], "ok")
        self.assertEqual(count(s, "ToolCallStarted"), 3, "each call ran once")

    def test_no_retry_gives_the_drop(self):
        s = callsheet.Client(FLAKY, token=TOKEN, retries=0).open_session()
        with self.assertRaises(Exception):
            s.turn([{"id": "w", "name": "read", "arguments": {"path": "x"}}], id="drop-once-py")

    def test_native_turns(self):
        s = self.client(FLAKY).open_session()
        completion = {"id": "chatcmpl-py", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "write", "arguments": '{"path":"a.txt","content":"a"}'}},
                {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.txt"'}}]}}]}
        a = s.turn_native(completion, "openai_chat")
        self.assertEqual(a["turn"], "chatcmpl-py")
        self.assertEqual([m["tool_call_id"] for m in a["messages"]], ["call_a", "call_b"])
        self.assertTrue(a["messages"][1]["content"].startswith("[blocked: invalid_arguments"))
        self.assertEqual(s.turn_native(completion, "openai_chat"), a, "the same response answers the same")
        content = [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}}]
        a = s.turn_native(content, "anthropic", turn="drop-native-py")
        self.assertEqual(a["turn"], "drop-native-py")
        self.assertEqual(a["message"]["content"][0]["tool_use_id"], "toolu_1")
        out = s.turn_native([{"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path":"a.txt"}'}], "openai_responses")
        self.assertEqual(out["input"][0]["type"], "function_call_output")
        self.assertEqual(count(s, "TurnReceived"), 3)
        with self.assertRaises(callsheet.CallsheetError) as e:
            s.turn_native({"role": "assistant", "content": "Done."}, "anthropic")
        self.assertEqual((e.exception.status, e.exception.code), (400, "no_tool_calls"))

    def test_streamed_turn(self):
        # Each batch's answer, and the end's, is lost once on the way back
        # (a "drop-" turn id): the client sends it again and nothing runs twice.
        s = self.client(FLAKY).open_session()

        def read(id):
            return {"id": id, "name": "read", "arguments": {"path": "nothing-" + id}}
        t = s.open_turn([read("a")], id="drop-stream-py", cap=2)
        self.assertEqual((t.id, t.calls, t.cap, t.parallel_tool_calls), ("drop-stream-py", 1, 2, True))
        self.assertEqual(t.add([read("b"), read("c")])["calls"], 3)
        a = t.end()
        self.assertEqual((a["status"], [r["id"] for r in a["results"]]), ("complete", ["a", "b", "c"]))
        # A read's claim is in its outcome: here a ToolCallFailed (no such file).
        self.assertEqual((count(s, "ToolCallFailed"), count(s, "CallsAdded")), (3, 2), "3 calls run once, in 2 batches")
        # A harness that restarted streams the same response again: each
        # batch and the end are answered from the record.
        again = s.open_turn([read("a")], id="drop-stream-py")
        self.assertEqual(again.add([read("b"), read("c")])["from"], 1)
        self.assertEqual(len(again.end()["results"]), 3)
        self.assertEqual(count(s, "ToolCallFailed"), 3, "nothing ran again")
        with self.assertRaises(callsheet.CallsheetError) as e:
            t.add([read("d")])
        self.assertEqual((e.exception.status, e.exception.code), (409, "conflict"))
        self.assertIn("ended", e.exception.message)
        s.turn([read("p")], id="posted-py")
        with self.assertRaises(callsheet.CallsheetError) as e:
            s.open_turn([read("p")], id="posted-py")
        self.assertEqual((e.exception.status, e.exception.code), (409, "turn_id_reused"))

    def test_streamed_native_turns(self):
        # Pieces as a harness assembles them from each provider's stream,
        # posted as each call completes; the end answers in that shape.
        s = self.client(FLAKY).open_session()
        t = s.open_turn({"index": 0, "id": "call_a", "type": "function",
                         "function": {"name": "write", "arguments": '{"path":"s.txt","content":"s"}'}},
                        id="chatcmpl-stream-py", format="openai_chat")
        t.add({"index": 1, "id": "call_b", "type": "function", "function": {"name": "read", "arguments": '{"path":"s.txt"}'}})
        a = t.end()
        self.assertEqual(a["turn"], "chatcmpl-stream-py")
        self.assertEqual([(m["role"], m["tool_call_id"]) for m in a["messages"]], [("tool", "call_a"), ("tool", "call_b")])
        self.assertIn("1\ts", a["messages"][1]["content"], "b read what a wrote")
        t = s.open_turn({"type": "response.output_item.done", "output_index": 1, "item": {
            "type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read", "arguments": '{"path":"s.txt"}', "status": "completed"}},
            id="drop-resp-py", format="openai_responses")
        out = t.end()
        self.assertEqual([(i["type"], i["call_id"]) for i in out["input"]], [("function_call_output", "c1")])
        t = s.open_turn({"type": "tool_use", "id": "toolu_s", "name": "read", "input": {"path": "s.txt"}},
                        id="msg_stream_py", format="anthropic")
        m = t.end()["message"]
        self.assertEqual((m["role"], m["content"][0]["type"], m["content"][0]["tool_use_id"]), ("user", "tool_result", "toolu_s"))
        with self.assertRaises(callsheet.CallsheetError) as e:
            s.open_turn({"type": "text", "text": "Let me look."}, id="msg_text_py", format="anthropic")
        self.assertEqual((e.exception.status, e.exception.code), (400, "no_tool_calls"))

    def test_events_resume_after_drop(self):
        s = self.client(FLAKY).open_session()
        s.turn([{"id": "r", "name": "read", "arguments": {"path": "nothing"}}])
        want = len(list(s.events(follow=False)))
        self.assertGreater(want, 3)
        seqs = []
        for ev in s.events():
            seqs.append(ev["seq"])
            if len(seqs) == want:
                break
        self.assertEqual(seqs, list(range(1, want + 1)), "each event once, across the cut after 3")

    def test_approvals_answers_and_errors(self):
        s = self.client().open_session()
        a = s.turn([{"id": "q", "name": "question", "arguments": {"question": "Go on?"}},
                    {"id": "w", "name": "write", "arguments": {"path": "charges/1.txt", "content": "1"}}], id="t1", wait=False)
        self.assertEqual(a["status"], "running")

        def answered():
            try:
                s.answer("q", "yes")
                return True
            except callsheet.CallsheetError as e:
                if e.code != "conflict":
                    raise
                return False
        until(answered, "the question")
        approvals = until(s.approvals, "the approval")
        self.assertEqual(approvals[0]["call"], "w")
        s.approve("w", allow=True, reason="fine")
        done = until(lambda: (lambda t: t if t["status"] == "complete" else None)(s.get_turn("t1")), "the turn")
        self.assertEqual([r["outcome"] for r in done["results"]], ["ok", "ok"])
        self.assertEqual(done["results"][0]["content"][0]["json"], {"answer": "yes"})
        with self.assertRaises(callsheet.CallsheetError) as e:
            s.turn([{"id": "other", "name": "read", "arguments": {}}], id="t1")
        self.assertEqual((e.exception.status, e.exception.code), (409, "turn_id_reused"))
        with self.assertRaises(callsheet.CallsheetError) as e:
            self.client().session("no-such-session").transcript()
        self.assertEqual(e.exception.code, "not_found")


if __name__ == "__main__":
    unittest.main()
