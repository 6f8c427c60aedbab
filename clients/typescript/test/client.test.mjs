// Tests of @callsheet/client against a real node, run with node --test by
// clients/clients_test.go (Node 22 and the machine's Node), which builds the
// package into CALLSHEET_CLIENT_DIST and passes the node's and the faulty
// proxy's URLs (internal/clienttest).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { join, dirname } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";

const { Client, CallsheetError } = await import(process.env.CALLSHEET_CLIENT_DIST + "/index.js");
const URL = process.env.CALLSHEET_URL;
const FLAKY = process.env.CALLSHEET_FLAKY_URL;
const TOKEN = process.env.CALLSHEET_TOKEN;
const HERE = dirname(dirname(fileURLToPath(import.meta.url)));

const client = (url = URL) => new Client(url, { token: TOKEN, backoffMs: 50, maxBackoffMs: 1000 });
const HOLD_MS = 5000; // clienttest.Hold
const V = process.versions.node;

/** When the proxy saw each request for turn id, in ms after the first. */
async function attempts(id) {
  return (await (await fetch(FLAKY + "/clienttest/attempts/" + id)).json()).attempts;
}

/** The requests for id came again no sooner than Retry-After (1 s; 1-2 s as a date) said, and reached past the hold. */
async function checkAttempts(id) {
  const at = await attempts(id);
  assert.ok(at.length >= 2, `${id}: requests at ${at} ms, want a retry`);
  for (let i = 1; i < at.length; i++) {
    if (at[i - 1] < HOLD_MS) assert.ok(at[i] - at[i - 1] >= 900, `${id}: requests at ${at} ms: sent again sooner than Retry-After`);
  }
  if (id.startsWith("moving-")) assert.ok(at[at.length - 1] >= HOLD_MS, `${id}: requests at ${at} ms: none after the hold`);
}
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
  const dir = mkdtempSync(join(tmpdir(), "callsheet-readme-"));
  let out;
  try {
    mkdirSync(join(dir, "node_modules", "@callsheet"), { recursive: true });
    symlinkSync(dirname(process.env.CALLSHEET_CLIENT_DIST), join(dir, "node_modules", "@callsheet", "client"));
    writeFileSync(join(dir, "first-turn.mjs"), m[1]);
    out = execFileSync(process.execPath, [join(dir, "first-turn.mjs")], { encoding: "utf8" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(out, m[2]);
  console.log("README example printed:\n" + out);
});

test("a drop, a 503 and a 502 are retried with the same turn id", async () => {
  const s = await client(FLAKY).openSession();
  for (const id of [`drop-ts-${process.versions.node}`, `busy-ts-${process.versions.node}`, `gateway-ts-${process.versions.node}`]) {
    const a = await s.turn([{ id: "w", name: "write", arguments: { path: "x.txt", content: "x" } }], { id });
    assert.equal(a.turn, id);
    assert.equal(a.results[0].outcome, "ok");
  }
  assert.equal(await count(s, "ToolCallStarted"), 3, "each call ran once");
});

test("without retries the drop is seen", async () => {
  const s = await new Client(FLAKY, { token: TOKEN, retries: 0 }).openSession();
  await assert.rejects(s.turn([{ id: "r", name: "read", arguments: { path: "x" } }], { id: `drop-once-ts-${process.versions.node}` }));
});

test("rides out a takeover, honouring Retry-After", async () => {
  // The proxy answers each "moving-" turn 503 with Retry-After for 5 s, as a
  // fleet node answers a call that meets a takeover: a client with the
  // default budget waits it out.
  const c = new Client(FLAKY, { token: TOKEN });
  const [posted, streamed, read, limited] = await Promise.all([0, 1, 2, 3].map(() => c.openSession()));
  const write = (id) => [{ id: "w", name: "write", arguments: { path: id + ".txt", content: "x" } }];
  const ids = [`moving-ts-${V}`, `moving-stream-ts-${V}`, `moving-date-ts-${V}`, `limited-ts-${V}`];
  await client().session(read.id).turn(write(ids[2]), { id: ids[2] });
  await Promise.all([
    posted.turn(write(ids[0]), { id: ids[0] }),
    streamed.openTurn(write(ids[1]), { id: ids[1] }).then((t) => t.end()),
    read.getTurn(ids[2]).then((a) => assert.equal(a.status, "complete")),
    limited.turn(write(ids[3]), { id: ids[3] }),
  ]);
  for (const s of [posted, streamed, read, limited]) assert.equal(await count(s, "ToolCallStarted"), 1, "each call ran once");
  for (const id of ids) await checkAttempts(id);

  // A budget shorter than the takeover gives the node's answer.
  const short = new Client(FLAKY, { token: TOKEN, retryForMs: 2000 }).session(posted.id);
  await assert.rejects(short.turn(write(`moving-short-ts-${V}`), { id: `moving-short-ts-${V}` }), (e) =>
    e instanceof CallsheetError && e.status === 503 && e.code === "unavailable" && /moving to another node/.test(e.message));
  const n = (await attempts(`moving-short-ts-${V}`)).length;
  assert.ok(n === 2 || n === 3, `${n} attempts within 2 s of Retry-After: 1, want 2 or 3`);
  // Opening a session has no id: a 503 is not sent again (the proxy's
  // second answer would be a session).
  await assert.rejects(c.openSession({ workspace: `busy-open-ts-${V}` }), (e) => e instanceof CallsheetError && e.status === 503);
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

test("streamed turns", async () => {
  // Each batch's answer, and the end's, is lost once on the way back (a
  // "drop-" turn id): the client sends it again and nothing runs twice.
  const s = await client(FLAKY).openSession();
  const read = (id) => ({ id, name: "read", arguments: { path: "nothing-" + id } });
  const id = `drop-stream-ts-${process.versions.node}`;
  const t = await s.openTurn([read("a")], { id, cap: 2 });
  assert.deepEqual([t.id, t.calls, t.cap, t.parallelToolCalls], [id, 1, 2, true]);
  assert.equal((await t.add([read("b"), read("c")])).calls, 3);
  const a = await t.end();
  assert.deepEqual([a.status, a.results.map((r) => r.id)], ["complete", ["a", "b", "c"]]);
  // A read's claim is in its outcome: here a ToolCallFailed (no such file).
  assert.deepEqual([await count(s, "ToolCallFailed"), await count(s, "CallsAdded")], [3, 2], "3 calls run once, in 2 batches");
  // A harness that restarted streams the same response again: each batch
  // and the end are answered from the record.
  const again = await s.openTurn([read("a")], { id });
  assert.equal((await again.add([read("b"), read("c")])).from, 1);
  assert.equal((await again.end()).results.length, 3);
  assert.equal(await count(s, "ToolCallFailed"), 3, "nothing ran again");
  await assert.rejects(t.add([read("d")]), (e) => e instanceof CallsheetError && e.status === 409 && e.code === "conflict" && /ended/.test(e.message));
  await s.turn([read("p")], { id: "posted-ts" });
  await assert.rejects(s.openTurn([read("p")], { id: "posted-ts" }), (e) => e.code === "turn_id_reused" && e.status === 409);

  // Pieces as a harness assembles them from each provider's stream.
  const c = await s.openTurnNative({ index: 0, id: "call_a", type: "function", function: { name: "write", arguments: '{"path":"s.txt","content":"s"}' } },
    "openai_chat", { turn: "chatcmpl-stream-ts" });
  await c.add({ index: 1, id: "call_b", type: "function", function: { name: "read", arguments: '{"path":"s.txt"}' } });
  const ca = await c.end();
  assert.deepEqual(ca.messages.map((m) => [m.role, m.tool_call_id]), [["tool", "call_a"], ["tool", "call_b"]]);
  assert.match(ca.messages[1].content, /1\ts/, "b read what a wrote");
  const r = await s.openTurnNative({ type: "response.output_item.done", output_index: 1, item: {
    type: "function_call", id: "fc_1", call_id: "c1", name: "read", arguments: '{"path":"s.txt"}', status: "completed" } },
  "openai_responses", { turn: `drop-resp-ts-${process.versions.node}` });
  assert.deepEqual((await r.end()).input.map((i) => [i.type, i.call_id]), [["function_call_output", "c1"]]);
  const m = await s.openTurnNative({ type: "tool_use", id: "toolu_s", name: "read", input: { path: "s.txt" } }, "anthropic", { turn: "msg_stream_ts" });
  const ma = await m.end();
  assert.deepEqual([ma.message.role, ma.message.content[0].type, ma.message.content[0].tool_use_id], ["user", "tool_result", "toolu_s"]);
  await assert.rejects(s.openTurnNative({ type: "text", text: "Let me look." }, "anthropic", { turn: "msg_text_ts" }), (e) => e.code === "no_tool_calls" && e.status === 400);
});

// A fetch that answers every request with one recorded Server-Sent Events
// stream, for the providers' SDKs to parse as they parse the real ones.
const recorded = (events) => async () => new Response(
  events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(""),
  { status: 200, headers: { "content-type": "text/event-stream" } });

test("streamed turns from the SDKs' streams", async () => {
  const mods = process.env.CALLSHEET_NATIVE_MODULES;
  const { default: OpenAI } = await import(pathToFileURL(join(mods, "openai", "index.mjs")).href);
  const { default: Anthropic } = await import(pathToFileURL(join(mods, "@anthropic-ai", "sdk", "index.mjs")).href);
  const s = await client(FLAKY).openSession();
  const suffix = process.versions.node;

  // openai's Responses stream: each function_call posted at its
  // response.output_item.done, the turn named by response.created's id.
  const item = (id, call, name, args) => ({ type: "function_call", id, call_id: call, name, arguments: args, status: "completed" });
  const oai = new OpenAI({ apiKey: "recorded", baseURL: "http://recorded.invalid/v1", fetch: recorded([
    { type: "response.created", sequence_number: 0, response: { id: "resp_st_" + suffix, object: "response", status: "in_progress", output: [] } },
    { type: "response.output_item.added", sequence_number: 1, output_index: 0, item: { ...item("fc_1", "call_w", "write", ""), status: "in_progress" } },
    { type: "response.function_call_arguments.delta", sequence_number: 2, output_index: 0, item_id: "fc_1", delta: '{"path":"r.txt","content":"r"}' },
    { type: "response.output_item.done", sequence_number: 3, output_index: 0, item: item("fc_1", "call_w", "write", '{"path":"r.txt","content":"r"}') },
    { type: "response.output_item.done", sequence_number: 4, output_index: 1, item: item("fc_2", "call_r", "read", '{"path":"r.txt"}') },
    { type: "response.completed", sequence_number: 5, response: { id: "resp_st_" + suffix, object: "response", status: "completed", output: [] } },
  ]) });
  let id, turn;
  for await (const ev of await oai.responses.create({ model: "gpt-4.1", input: "write r.txt, then read it", stream: true })) {
    if (ev.type === "response.created") id = ev.response.id;
    if (ev.type !== "response.output_item.done" || ev.item.type !== "function_call") continue;
    if (turn) await turn.add(ev);
    else turn = await s.openTurnNative(ev, "openai_responses", { turn: id });
  }
  const ra = await turn.end();
  assert.equal(ra.turn, "resp_st_" + suffix);
  assert.deepEqual(ra.input.map((i) => [i.type, i.call_id]), [["function_call_output", "call_w"], ["function_call_output", "call_r"]]);
  assert.match(ra.input[1].output, /1\tr/, "the read saw the write");

  // @anthropic-ai/sdk's MessageStream: a tool_use block posted at its
  // content_block_stop, whole in the stream's currentMessage.
  const ant = new Anthropic({ apiKey: "recorded", baseURL: "http://recorded.invalid", fetch: recorded([
    { type: "message_start", message: { id: "msg_st_" + suffix, type: "message", role: "assistant", content: [], model: "claude-sonnet-4-5", stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Reading it." } },
    { type: "content_block_stop", index: 0 },
    { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_st", name: "read", input: {} } },
    { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"path":' } },
    { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '"r.txt"}' } },
    { type: "content_block_stop", index: 1 },
    { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 30 } },
    { type: "message_stop" },
  ]) });
  const stream = ant.messages.stream({ model: "claude-sonnet-4-5", max_tokens: 1024, messages: [{ role: "user", content: "read r.txt" }] });
  let at;
  for await (const ev of stream) {
    if (ev.type !== "content_block_stop") continue;
    const block = stream.currentMessage.content[ev.index];
    if (block.type !== "tool_use") continue;
    if (at) await at.add(block);
    else at = await s.openTurnNative(block, "anthropic", { turn: stream.currentMessage.id });
  }
  const aa = await at.end();
  assert.equal(aa.turn, "msg_st_" + suffix);
  assert.deepEqual(aa.message.content.map((b) => [b.type, b.tool_use_id]), [["tool_result", "toolu_st"]]);
  assert.match(aa.message.content[0].content, /1\tr/);
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

test("Retry-After as seconds and as an HTTP-date", async () => {
  const { retryAfterMs } = await import(process.env.CALLSHEET_CLIENT_DIST + "/index.js");
  const now = Date.UTC(2026, 11, 2, 5, 0, 0);
  assert.equal(retryAfterMs(" 2 ", now), 2000);
  assert.equal(retryAfterMs(new Date(now + 3000).toUTCString(), now), 3000);
  assert.equal(retryAfterMs("Wednesday, 02-Dec-26 05:00:04 GMT", now), 4000);
  assert.equal(retryAfterMs("Wed Dec  2 05:00:05 2026", now), 5000);
  assert.equal(retryAfterMs(new Date(now - 60000).toUTCString(), now), 0);
  for (const bad of [null, "", "-1", "1.5", "soon", "²", "Wed, 99 Foo GMT"]) assert.equal(retryAfterMs(bad, now), undefined, String(bad));
});
