// A complete callsheet harness-tool worker in TypeScript on Node's fetch
// (Node 22.18 or newer runs it as is: `node worker.ts`; no packages).
//
// It registers two tools of a toy shop with a callsheet node and serves
// their calls (docs/workers.md):
//   lookup_order  read_only, safe, parallel_safe: look an order up
//   charge        side_effecting, never: charge an order (takes delay_ms, as
//                 a slow payment API would), with a 2 s heartbeat_timeout
//
// callsheet validates every call's arguments against the schema before a
// worker sees it, runs permission, scheduling and claims, and commits
// results in call order; the worker only runs what it is handed. Copy this
// file and replace the tools table with your own.
//
// Environment: CALLSHEET_URL (default http://127.0.0.1:7700),
// CALLSHEET_TOKEN (the tenant's bearer token, if the node has tenants),
// WORKER_ID, WORKER_CONCURRENCY (default 4). SIGTERM or Ctrl-C stops
// polling; running tasks finish first.

const BASE = (process.env.CALLSHEET_URL ?? "http://127.0.0.1:7700").replace(/\/+$/, "");
const TOKEN = process.env.CALLSHEET_TOKEN ?? "";
const WORKER = process.env.WORKER_ID ?? `ts-${process.pid}`;
const CONCURRENCY = Number(process.env.WORKER_CONCURRENCY ?? "4");
const WAIT_MS = 30000; // how long one poll is held when no task is there (at most 60000)

type Part =
  | { type: "text"; text: string }
  | { type: "json"; json: unknown }
  | { type: "image"; mime: string; data: string };

interface Task {
  task: string;
  session: string;
  turn: string;
  call: string;
  tool: string;
  arguments: any;
  attempt: number;
  idempotency_key: string;
  deadline: string;
  heartbeat_timeout_ms?: number;
}

// A failure retrying cannot fix: the attempt fails with permanent: true.
class Permanent extends Error {}

interface Tool {
  spec: Record<string, unknown>;
  run: (task: Task, args: any, signal: AbortSignal) => Promise<Part[]>;
}

async function api(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<{ status: number; answer: any }> {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
  const res = await fetch(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
  const text = await res.text();
  let answer: any = null;
  if (text) {
    try { answer = JSON.parse(text); } catch { answer = { error: { code: "http", message: text } }; }
  }
  return { status: res.status, answer };
}

const ORDERS: Record<string, string> = { "A-1": "shipped", "B-2": "packing", "C-3": "delivered" };

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); reject(new Error("cancelled before the charge was made")); }, { once: true });
  });
}

const TOOLS: Record<string, Tool> = {
  lookup_order: {
    spec: {
      description: "Look an order of the shop up by its id and say its status.",
      guidelines: ["Use to answer questions about an order's status."],
      input_schema: { type: "object", properties: { order: { type: "string", description: "order id, such as A-1" } }, required: ["order"], additionalProperties: false },
      effect: "read_only", replay: "safe", concurrency: "parallel_safe", timeout: "10s",
    },
    run: async (task, args) => {
      const status = ORDERS[args.order];
      if (status === undefined) throw new Permanent(`no order ${args.order}`);
      return [{ type: "json", json: { order: args.order, status, idempotency_key: task.idempotency_key } }];
    },
  },
  charge: {
    spec: {
      description: "Charge an order to the customer's card.",
      guidelines: ["Use only when the user asked to pay for an order."],
      input_schema: {
        type: "object",
        properties: { order: { type: "string" }, cents: { type: "integer", minimum: 1 }, delay_ms: { type: "integer", minimum: 0 } },
        required: ["order", "cents"], additionalProperties: false,
      },
      timeout: "60s", heartbeat_timeout: "2s", // side_effecting, never, exclusive: left out, strictest
    },
    run: async (task, args, signal) => {
      // A real worker passes the idempotency key to the payment API, so a
      // charge it may already have made is not made twice.
      await sleep(args.delay_ms ?? 0, signal);
      return [{ type: "text", text: `charged ${args.order} ${args.cents} cents (key ${task.idempotency_key})` }];
    },
  },
};

async function serve(task: Task): Promise<void> {
  console.log(`took tool=${task.tool} call=${task.call} attempt=${task.attempt} key=${task.idempotency_key}`);
  const cancel = new AbortController();
  const deadline = setTimeout(() => cancel.abort(), Math.max(new Date(task.deadline).getTime() - Date.now(), 0));
  // Heartbeat while the task runs; the node answers cancel (or 409 once the
  // attempt is settled): then what we do no longer counts.
  const beat = setInterval(async () => {
    try {
      const { status, answer } = await api("POST", `/v1/tasks/${task.task}/heartbeat`, {});
      if (status === 409 || (status === 200 && answer.cancel)) cancel.abort();
    } catch { /* the next beat tries again */ }
  }, (task.heartbeat_timeout_ms ?? 15000) / 3);
  let path: string, body: unknown;
  try {
    const content = await TOOLS[task.tool].run(task, task.arguments, cancel.signal);
    [path, body] = ["complete", { content }];
  } catch (e) {
    const err = e as Error;
    [path, body] = ["fail", { error: err instanceof Permanent ? err.message : `${err.name}: ${err.message}`, permanent: err instanceof Permanent }];
  } finally {
    clearInterval(beat);
    clearTimeout(deadline);
  }
  const { status, answer } = await api("POST", `/v1/tasks/${task.task}/${path}`, body);
  if (status !== 200) console.error(`answer for call ${task.call} refused: ${status} ${JSON.stringify(answer)}`);
}

async function main(): Promise<void> {
  for (const [name, tool] of Object.entries(TOOLS)) {
    const { status, answer } = await api("PUT", `/v1/tools/${name}`, tool.spec);
    if (status !== 200) { console.error(`registering ${name}: ${status} ${JSON.stringify(answer)}`); process.exit(1); }
  }
  console.log(`registered ${Object.keys(TOOLS).join(", ")} as worker ${WORKER}`);

  const stop = new AbortController();
  process.on("SIGTERM", () => stop.abort());
  process.on("SIGINT", () => stop.abort());
  const running = new Set<Promise<void>>();
  let backoff = 100;
  while (!stop.signal.aborted) {
    while (running.size >= CONCURRENCY) await Promise.race(running);
    let status = 0, answer: any = null;
    try {
      ({ status, answer } = await api("POST", "/v1/workers/poll", { worker: WORKER, tools: Object.keys(TOOLS), max: CONCURRENCY - running.size, wait_ms: WAIT_MS }, stop.signal));
    } catch (e) {
      if (stop.signal.aborted) break;
      answer = { error: { message: String(e) } }; // the node is restarting, or unreachable
    }
    if (status !== 200 && status !== 204) {
      console.error(`poll: ${status} ${JSON.stringify(answer)}`);
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5000);
      continue;
    }
    backoff = 100;
    for (const task of status === 200 ? (answer.tasks as Task[]) : []) {
      const p: Promise<void> = serve(task).catch((e) => console.error(`task ${task.call}: ${e}`)).finally(() => running.delete(p));
      running.add(p);
    }
  }
  await Promise.all(running);
}

main().catch((e) => { console.error(e); process.exit(1); });
