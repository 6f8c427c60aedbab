// Tests of @callsheet/client against a real node, run with node --test by
// clients/clients_test.go (Node 22 and the machine's Node), which builds the
// package into CALLSHEET_CLIENT_DIST and passes the node's and the faulty
// proxy's URLs (internal/clienttest).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, symlinkSync } from "node:fs";
import { join, dirname } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";

const { Client, CallsheetError } = await import(process.env.CALLSHEET_CLIENT_DIST + "/index.js");
const URL = process.env.CALLSHEET_URL;
const FLAKY = process.env.CALLSHEET_FLAKY_URL;
const TOKEN = process.env.CALLSHEET_TOKEN;
const HERE = dirname(dirname(fileURLToPath(import.meta.url)));

const client = (url = URL) => new Client(url, { token: TOKEN, retries: 3, backoffMs: 50 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function count(session, type) {
  let n = 0;
  for await (const ev of session.events({ follow: false })) if (ev.type === type) n++;
  return n;
}

async function until(f, what) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}

test("the README example runs as written", () => {
  const text = readFileSync(join(HERE, "README.md"), "utf8");
  const m = /## A first turn[\s\S]*?```js\n([\s\S]*?)```[\s\S]*?prints\n\n```(?:text)?\n([\s\S]*?)```/.exec(text);
  assert.ok(m, "README.md has no first-turn example");
  const dir = join(tmpdir(), `callsheet-readme-${process.pid}-${process.versions.node}`);
  mkdirSync(join(dir, "node_modules", "@callsheet"), { recursive: true });
  try { symlinkSync(dirname(process.env.CALLSHEET_CLIENT_DIST), join(dir, "node_modules", "@callsheet", "client")); } catch {}
  writeFileSync(join(dir, "first-turn.mjs"), m[1]);
  const out = execFileSync(process.execPath, [join(dir, "first-turn.mjs")], { encoding: "utf8" });
  assert.equal(out, m[2]);
  console.log("README example printed:\n" + out);
});

test("a drop and a 503 are retried with the same turn id", async () => {
  const s = await client(FLAKY).openSession();
  for (const id of [`drop-ts-${process.versions.node}`, `busy-ts-${process.versions.node}`]) {
    const a = await s.turn([{ id: "w", name: "write", arguments: { path: "x.txt", content: "x" } }], { id });
    assert.equal(a.turn, id);
    assert.equal(a.results[0].outcome, "ok");
  }
  assert.equal(await count(s, "ToolCallStarted"), 2, "each call ran once");
});

test("without retries the drop is seen", async () => {
  const s = await new Client(FLAKY, { token: TOKEN, retries: 0 }).openSession();
  await assert.rejects(s.turn([{ id: "r", name: "read", arguments: { path: "x" } }], { id: `drop-once-ts-${process.versions.node}` }));
});

test("provider-native turns", async () => {
  const s = await client(FLAKY).openSession();
  const completion = { id: "chatcmpl-ts", object: "chat.completion", choices: [{ index: 0, finish_reason: "tool_calls", message: {
    role: "assistant", content: null, tool_calls: [
      { id: "call_a", type: "function", function: { name: "write", arguments: '{"path":"a.txt","content":"a"}' } },
      { id: "call_b", type: "function", function: { name: "read", arguments: '{"path":"a.txt"' } }] } }] };
  const a = await s.turnNative(completion, "openai_chat");
  assert.equal(a.turn, "chatcmpl-ts");
  assert.deepEqual(a.messages.map((m) => m.tool_call_id), ["call_a", "call_b"]);
  assert.match(a.messages[1].content, /^\[blocked: invalid_arguments/);
  assert.deepEqual(await s.turnNative(completion, "openai_chat"), a, "the same response answers the same");
  const b = await s.turnNative([{ type: "tool_use", id: "toolu_1", name: "read", input: { path: "a.txt" } }], "anthropic", { turn: "drop-native-ts-" + process.versions.node });
  assert.equal(b.message.content[0].tool_use_id, "toolu_1");
  const c = await s.turnNative([{ type: "function_call", call_id: "c1", name: "read", arguments: '{"path":"a.txt"}' }], "openai_responses");
  assert.equal(c.input[0].type, "function_call_output");
  assert.equal(await count(s, "TurnReceived"), 3);
  await assert.rejects(s.turnNative({ role: "assistant", content: "Done." }, "anthropic"), (e) => e instanceof CallsheetError && e.code === "no_tool_calls" && e.status === 400);
});

test("events resume after a drop", async () => {
  const s = await client(FLAKY).openSession();
  await s.turn([{ id: "r", name: "read", arguments: { path: "nothing" } }]);
  let want = 0;
  for await (const _ of s.events({ follow: false })) want++;
  assert.ok(want > 3);
  const seqs = [];
  for await (const ev of s.events()) {
    seqs.push(ev.seq);
    if (seqs.length === want) break;
  }
  assert.deepEqual(seqs, Array.from({ length: want }, (_, i) => i + 1), "each event once, across the cut after 3");
});

test("approvals, answers and errors", async () => {
  const s = await client().openSession();
  const a = await s.submit([
    { id: "q", name: "question", arguments: { question: "Go on?" } },
    { id: "w", name: "write", arguments: { path: "charges/1.txt", content: "1" } }], { id: "t1" });
  assert.equal(a.status, "running");
  await until(() => s.answer("q", "yes").then(() => true, (e) => { if (e.code !== "conflict") throw e; return false; }), "the question");
  const approvals = await until(async () => { const l = await s.approvals(); return l.length ? l : null; }, "the approval");
  assert.equal(approvals[0].call, "w");
  await s.approve("w", true, "fine");
  const done = await until(async () => { const t = await s.getTurn("t1"); return t.status === "complete" ? t : null; }, "the turn");
  assert.deepEqual(done.results.map((r) => r.outcome), ["ok", "ok"]);
  assert.deepEqual(done.results[0].content[0].json, { answer: "yes" });
  await assert.rejects(s.turn([{ id: "other", name: "read", arguments: {} }], { id: "t1" }), (e) => e.code === "turn_id_reused" && e.status === 409);
  await assert.rejects(client().session("no-such-session").transcript(), (e) => e.code === "not_found");
});
