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

// A finished task whose worker has no poll out answers with "next": the body
// of a poll for its own slot, so the node hands over the answer and holds the
// request as that poll, and the next task comes in the answer
// (docs/workers.md). polls counts this worker's polls out; useNext turns off
// on a node older than "next", and once the worker is stopping.
let polls = 0;
let useNext = true;

function pollBody(max: number) {
  return { worker: WORKER, tools: Object.keys(TOOLS), max, wait_ms: WAIT_MS };
}

// run runs one task and returns its answer's path and body.
async function run(task: Task): Promise<[string, Record<string, unknown>]> {
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
  try {
    return ["complete", { content: await TOOLS[task.tool].run(task, task.arguments, cancel.signal) }];
  } catch (e) {
    const err = e as Error;
    return ["fail", { error: err instanceof Permanent ? err.message : `${err.name}: ${err.message}`, permanent: err instanceof Permanent }];
  } finally {
    clearInterval(beat);
    clearTimeout(deadline);
  }
}

// answer posts a task's answer, with next when no poll of this worker is
// out, and returns the task that came with it, if any.
async function answer(task: Task, path: string, body: Record<string, unknown>): Promise<Task | undefined> {
  const url = `/v1/tasks/${task.task}/${path}`;
  let status = 0, got: any = null, next: Task | undefined;
  if (useNext && polls === 0) {
    polls++;
    try {
      ({ status, answer: got } = await api("POST", url, { ...body, next: pollBody(1) }));
    } catch { /* the exchange failed before the node answered */ } finally {
      polls--;
    }
    if (status === 200) {
      next = (got.tasks as Task[])[0];
      if (got.next_error) console.error(`next: ${JSON.stringify(got.next_error)}`);
    } else if (status === 400 && JSON.stringify(got).includes("next")) {
      useNext = false; // a node older than next
    }
  }
  if (status === 0 || status === 400) ({ status, answer: got } = await api("POST", url, body)); // nothing was handed over
  if (status !== 200) console.error(`answer for call ${task.call} refused: ${status} ${JSON.stringify(got)}`);
  return next;
}

// serve runs task in its slot, then each next task that comes in the answer.
async function serve(task: Task | undefined): Promise<void> {
  while (task !== undefined) {
    const [path, body] = await run(task);
    task = await answer(task, path, body);
  }
}

async function main(): Promise<void> {
  for (const [name, tool] of Object.entries(TOOLS)) {
    const { status, answer } = await api("PUT", `/v1/tools/${name}`, tool.spec);
    if (status !== 200) { console.error(`registering ${name}: ${status} ${JSON.stringify(answer)}`); process.exit(1); }
  }
  console.log(`registered ${Object.keys(TOOLS).join(", ")} as worker ${WORKER}`);

  const stop = new AbortController();
  const stopping = () => { useNext = false; stop.abort(); };
  process.on("SIGTERM", stopping);
  process.on("SIGINT", stopping);
  const running = new Set<Promise<void>>();
  let backoff = 100;
  while (!stop.signal.aborted) {
    while (running.size >= CONCURRENCY) await Promise.race(running);
    let status = 0, answer: any = null;
    polls++;
    try {
      ({ status, answer } = await api("POST", "/v1/workers/poll", pollBody(CONCURRENCY - running.size), stop.signal));
    } catch (e) {
      if (stop.signal.aborted) break;
      answer = { error: { message: String(e) } }; // the node is restarting, or unreachable
    } finally {
      polls--;
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
