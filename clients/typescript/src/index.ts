// @callsheet/client: a client of a callsheet node's HTTP API (docs/spec.md
// §8, docs/clients.md) on the standard fetch, for Node 18+, Deno and Bun.
//
// A turn's id is minted before its first attempt, so a post that meets a
// 503 (a fleet's takeover answers one with Retry-After), a 429 with
// Retry-After or a dropped connection is sent again with the same id, for
// up to retryForMs (30 s) after the first failure: the node answers a
// repeated turn id from its record and runs nothing twice.
// Errors the API answers reject with CallsheetError carrying its code.
// A streamed turn (Session.openTurn) posts each call as the model completes
// it, so it starts while the model still streams.

/**
 * An answer of the API that is not a success, with the API's error code and
 * the wait its Retry-After header asked for (ms; undefined without one).
 */
export class CallsheetError extends Error {
  readonly status: number;
  readonly code: string;
  readonly retryAfterMs: number | undefined;
  constructor(status: number, code: string, message: string, retryAfterMs?: number) {
    super(`callsheet: ${code} (${status}): ${message}`);
    this.name = "CallsheetError";
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }

  /**
   * Whether the answer says to come back: a 503 (a node answers it before it
   * acts, and during a takeover), or a 429 that names when (a limit that
   * waiting does not lift names no Retry-After).
   */
  get retryable(): boolean {
    return this.status === 503 || (this.status === 429 && this.retryAfterMs !== undefined);
  }

  /**
   * Whether a proxy in front of the node answered that its upstream failed
   * (502, 504): the request may or may not have reached the node, as with a
   * dropped connection, so it is sent again only where a drop would be.
   */
  get gateway(): boolean {
    return this.status === 502 || this.status === 504;
  }
}

/**
 * The wait, in ms, a Retry-After header asks for: delay-seconds or an
 * HTTP-date (RFC 9110 §10.2.3); undefined when absent or unreadable.
 */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value == null) return undefined;
  const v = value.trim();
  if (/^[0-9]{1,9}$/.test(v)) return Number(v) * 1000;
  // An HTTP-date names its weekday and GMT; Date.parse alone reads far more.
  if (!/^[A-Za-z]{3,9}, .* GMT$|^[A-Za-z]{3} [A-Za-z]{3} [ 0-9]\d \d\d:\d\d:\d\d \d{4}$/.test(v)) return undefined;
  const t = Date.parse(v.endsWith("GMT") ? v : v + " GMT");
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}

export interface ClientOptions {
  /** The tenant's bearer token, when the node has tenants. */
  token?: string | undefined;
  /**
   * How long after its first failure (a 503, a 429 with Retry-After, a
   * dropped connection) a request that may be sent again is, in ms (0:
   * never); default 30000. A wait that would end past it is not taken.
   */
  retryForMs?: number | undefined;
  /** The wait before the first retry of an answer without Retry-After, in ms, doubled after each and jittered; default 200. */
  backoffMs?: number | undefined;
  /** The most the doubling wait grows to, in ms; default 5000. */
  maxBackoffMs?: number | undefined;
  /** At most this many retries within retryForMs; default no cap. */
  retries?: number | undefined;
  /** The fetch to use; default the global one. */
  fetch?: typeof fetch | undefined;
}

/** One tool call as the model gave it; arguments is an object or a string holding one. */
export interface Call {
  id: string;
  name: string;
  arguments: unknown;
}

export type Part =
  | { type: "text"; text: string }
  | { type: "json"; json: unknown }
  | { type: "image"; mime: string; data: string };

export interface Result {
  id: string;
  name: string;
  outcome: "ok" | "error" | "blocked" | "indeterminate";
  block?: "invalid_arguments" | "unavailable" | "denied";
  content: Part[];
  truncated: boolean;
  full_output?: { store: string; object: string; bytes: number; lines: number };
  attempts: number;
}

export interface Notice {
  turn: string;
  call: string;
  tool: string;
  attempt: number;
  message: string;
}

/** A complete turn: its results in call order and its retry notices. */
export interface TurnAnswer {
  turn: string;
  status: "complete";
  results: Result[];
  notices: Notice[];
}

/** A turn whose calls are not all committed. */
export interface RunningTurn {
  turn: string;
  status: "running";
}

/** A call of a running turn that waits for a person. */
export interface Waiting {
  kind: "approval" | "question";
  call: string;
  name: string;
  arguments?: unknown;
  reason?: string;
  question?: string;
  options?: string[];
}

/** A running turn's provider-native answer: nothing to append yet. */
export interface RunningNative {
  turn: string;
  status: "running";
  waiting: Waiting[];
}

// The provider-native answers, typed so that each is assignable to the
// official SDKs' types: ChatCompletionMessageParam[] (openai),
// ResponseInputItem[] (openai), MessageParam (@anthropic-ai/sdk).

export type ChatToolMessage = { role: "tool"; tool_call_id: string; content: string };
export type ChatUserMessage = {
  role: "user";
  content: Array<{ type: "text"; text: string } | { type: "image_url"; image_url: { url: string } }>;
};
export interface ChatAnswer {
  turn: string;
  messages: Array<ChatToolMessage | ChatUserMessage>;
}

export type ResponsesInputText = { type: "input_text"; text: string };
export type ResponsesInputImage = { type: "input_image"; image_url: string; detail: "auto" };
export type FunctionCallOutput = {
  type: "function_call_output";
  call_id: string;
  output: string | Array<ResponsesInputText | ResponsesInputImage>;
};
export type ResponsesUserMessage = { type: "message"; role: "user"; content: ResponsesInputText[] };
export interface ResponsesAnswer {
  turn: string;
  input: Array<FunctionCallOutput | ResponsesUserMessage>;
}

export type AnthropicText = { type: "text"; text: string };
export type AnthropicImage = {
  type: "image";
  source: { type: "base64"; media_type: "image/png" | "image/jpeg" | "image/gif" | "image/webp"; data: string };
};
export type ToolResultBlock = {
  type: "tool_result";
  tool_use_id: string;
  content: string | Array<AnthropicText | AnthropicImage>;
  is_error?: boolean;
};
export interface AnthropicAnswer {
  turn: string;
  message: { role: "user"; content: Array<ToolResultBlock | AnthropicText> };
}

export interface NativeAnswers {
  openai_chat: ChatAnswer;
  openai_responses: ResponsesAnswer;
  anthropic: AnthropicAnswer;
}
/** The provider formats a turn may be posted and answered in. */
export type Format = keyof NativeAnswers;

/** One event of a session's log. */
export interface Event {
  seq: number;
  id: string;
  type: string;
  time: string;
  tenant: string;
  session: string;
  causation?: string;
  prev?: string;
  data: any;
}

/** A fresh turn id, for a caller that wants to know it before posting. */
export function newTurnId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return "turn_" + c.randomUUID().replaceAll("-", "");
  // Node 18 without the global Web Crypto: time and 64 random bits.
  const r = () => Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, "0");
  return "turn_" + Date.now().toString(16) + r() + r();
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One request's retries: for retryForMs after its first failure, at most
 * retries times, waiting what the answer's Retry-After says (and up to a
 * tenth more), else backoffMs doubling to maxBackoffMs, jittered down by up
 * to half, so that clients refused together do not come back together.
 */
class Retry {
  private first: number | undefined;
  private tries = 0;
  private next: number;
  constructor(private readonly c: Client) {
    this.next = c.backoffMs;
  }

  /** Sleeps before the next try and answers true, or answers false once the budget is spent or the wait would end past it. */
  async wait(retryAfter?: number): Promise<boolean> {
    const now = Date.now();
    this.first ??= now;
    if (this.tries >= this.c.retries) return false;
    let d: number;
    if (retryAfter !== undefined) {
      d = Math.max(retryAfter, this.c.backoffMs);
      d += Math.random() * d / 10;
    } else {
      d = this.next / 2 + Math.random() * this.next / 2;
      this.next = Math.min(2 * this.next, this.c.maxBackoffMs);
    }
    if (now + d > this.first + this.c.retryForMs) return false;
    this.tries++;
    await sleep(d);
    return true;
  }

  /** Starts the budget afresh: the request got somewhere (an event stream yielded events). */
  progressed(): void {
    this.first = undefined;
    this.tries = 0;
    this.next = this.c.backoffMs;
  }
}

/** A client of one node (or of a load balancer in front of a fleet). */
export class Client {
  readonly url: string;
  readonly token: string | undefined;
  readonly retryForMs: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  readonly retries: number;
  /** @internal */
  readonly fetchImpl: typeof fetch;

  constructor(url = "http://127.0.0.1:7700", options: ClientOptions = {}) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`url ${url}: want http://host:port`);
    this.url = url.replace(/\/+$/, "");
    this.token = options.token;
    this.retryForMs = options.retryForMs ?? 30000;
    this.backoffMs = options.backoffMs ?? 200;
    this.maxBackoffMs = options.maxBackoffMs ?? Math.max(5000, this.backoffMs);
    this.retries = options.retries ?? Infinity;
    if (!(this.retryForMs >= 0 && this.backoffMs > 0 && this.maxBackoffMs >= this.backoffMs && this.retries >= 0)) {
      throw new TypeError(`retryForMs ${this.retryForMs}, backoffMs ${this.backoffMs}, maxBackoffMs ${this.maxBackoffMs}, retries ${this.retries}: want retryForMs ≥ 0, 0 < backoffMs ≤ maxBackoffMs, retries ≥ 0`);
    }
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** @internal */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { Accept: "application/json", ...extra };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    return h;
  }

  /** @internal One request, its answer decoded; an API error rejects with CallsheetError. */
  async once(method: string, path: string, body?: string, headers?: Record<string, string>): Promise<any> {
    const h = this.headers(body === undefined ? headers : { "Content-Type": "application/json", ...headers });
    const init: RequestInit = { method, headers: h };
    if (body !== undefined) init.body = body;
    const res = await this.fetchImpl(this.url + path, init);
    const text = await res.text(); // a drop here rejects too
    if (!res.ok) throw apiError(res.status, text, res.headers.get("Retry-After"));
    return text.trim() ? JSON.parse(text) : null;
  }

  /**
   * @internal A request, sent again on a 503, a 429 with Retry-After or
   * (with drops, for an idempotent one) a dropped connection or a proxy's
   * 502 or 504.
   */
  async call(method: string, path: string, body?: unknown, drops = true): Promise<any> {
    const text = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
    const retry = new Retry(this);
    for (;;) {
      try {
        return await this.once(method, path, text);
      } catch (e) {
        const refused = e instanceof CallsheetError && e.retryable;
        const dropped = e instanceof CallsheetError ? e.gateway : !(e instanceof SyntaxError);
        if (!(refused || (drops && dropped))) throw e;
        if (!(await retry.wait(e instanceof CallsheetError ? e.retryAfterMs : undefined))) throw e;
      }
    }
  }

  /** Opens a session (not retried: a repeat would open a second one). */
  async openSession(options: { workspace?: string | undefined; agent?: string | undefined } = {}): Promise<Session> {
    const s = await this.once("POST", "/v1/sessions", JSON.stringify(options));
    return new Session(this, s.session, s.workspace);
  }

  /** The session with id, opened earlier. */
  session(id: string): Session {
    return new Session(this, id);
  }

  /** GET /v1/tools: the tool definitions to give the model in format. */
  async tools(format: "openai" | "openai_responses" | "anthropic" = "openai", agent?: string): Promise<{ format: string; tools: any[]; system?: string }> {
    const q = new URLSearchParams({ format });
    if (agent) q.set("agent", agent);
    return this.call("GET", "/v1/tools?" + q.toString());
  }
}

function apiError(status: number, text: string, retryAfter?: string | null): CallsheetError {
  const wait = retryAfterMs(retryAfter);
  try {
    const e = JSON.parse(text).error;
    if (e && typeof e.code === "string") return new CallsheetError(status, e.code, e.message, wait);
  } catch {
    // not the API's error body
  }
  return new CallsheetError(status, "http", text.trim(), wait);
}

/** Whether the node reads a turn id from body: a whole response's id. */
function hasResponseId(format: Format, body: unknown): boolean {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return false;
  const o = body as Record<string, unknown>;
  if (format === "openai_chat" && !("choices" in o)) return false;
  return typeof o.id === "string" && o.id !== "";
}

/** One session of a node. */
export class Session {
  readonly client: Client;
  readonly id: string;
  readonly workspace: string | undefined;

  constructor(client: Client, id: string, workspace?: string) {
    this.client = client;
    this.id = id;
    this.workspace = workspace;
  }

  private path(...parts: string[]): string {
    return "/v1/sessions/" + [this.id, ...parts].map(encodeURIComponent).join("/");
  }

  /** Posts calls as one turn and waits for its results. */
  turn(calls: Call[], options: { id?: string | undefined } = {}): Promise<TurnAnswer> {
    return this.client.call("POST", this.path("turns"), { id: options.id ?? newTurnId(), calls });
  }

  /** Posts calls as one turn and answers once it is recorded (?wait=0). */
  submit(calls: Call[], options: { id?: string | undefined } = {}): Promise<TurnAnswer | RunningTurn> {
    return this.client.call("POST", this.path("turns") + "?wait=0", { id: options.id ?? newTurnId(), calls });
  }

  /**
   * Opens a streamed turn with its first calls: post each next call with
   * add as the model completes it, then end. A call starts on the node as
   * soon as the schedule allows, not once the response is whole.
   * options.id is the turn's id (minted when left out); parallelToolCalls
   * and cap set its scheduling.
   */
  async openTurn(calls: Call[], options: StreamOptions & { id?: string | undefined } = {}): Promise<StreamedTurn<TurnAnswer>> {
    const id = options.id ?? newTurnId();
    const t = new StreamedTurn<TurnAnswer>(this, id, this.path("turns", id), undefined);
    await t.post(calls, options);
    return t;
  }

  /**
   * Opens a streamed turn with the first piece of a provider's stream in
   * format: a Chat tool call whose arguments are whole (or a list of them),
   * a Responses function_call item (or the response.output_item.done event
   * carrying it), an Anthropic tool_use block whose input is whole.
   * options.turn is the turn's id: the response id the stream's first event
   * carries, so a harness that restarts posts to the same turn. end answers
   * in the provider's shape, as turnNative does.
   */
  async openTurnNative<F extends Format>(piece: unknown, format: F, options: StreamOptions & { turn?: string | undefined } = {}): Promise<StreamedTurn<NativeAnswers[F]>> {
    const id = options.turn ?? newTurnId();
    const t = new StreamedTurn<NativeAnswers[F]>(this, id, this.path("turns", id), format);
    await t.post(piece, options);
    return t;
  }

  /** A turn posted before: complete, or running. */
  getTurn(id: string): Promise<TurnAnswer | RunningTurn> {
    return this.client.call("GET", this.path("turns", id));
  }

  private nativePath(response: unknown, format: Format, turn: string | undefined, wait: boolean): string {
    const q = new URLSearchParams({ format });
    const id = turn ?? (hasResponseId(format, response) ? undefined : newTurnId());
    if (id !== undefined) q.set("turn", id);
    if (!wait) q.set("wait", "0");
    return this.path("turns") + "?" + q.toString();
  }

  /**
   * Posts a model response in a provider's format as a turn, waits, and
   * answers in that provider's shape: what the harness appends to its
   * conversation. response is the whole response the SDK returned (a
   * ChatCompletion, a Response, a Message) or its assistant part (the
   * message, the output array, the content array). A whole response's id is
   * the turn id; for a part, options.turn names it, or one is minted before
   * the first attempt.
   */
  turnNative<F extends Format>(response: unknown, format: F, options: { turn?: string | undefined } = {}): Promise<NativeAnswers[F]> {
    return this.client.call("POST", this.nativePath(response, format, options.turn, true), response);
  }

  /** turnNative without waiting: a running turn answers what it waits for. */
  submitNative<F extends Format>(response: unknown, format: F, options: { turn?: string | undefined } = {}): Promise<NativeAnswers[F] | RunningNative> {
    return this.client.call("POST", this.nativePath(response, format, options.turn, false), response);
  }

  /** A turn posted before, in a provider's shape: complete, or running. */
  getTurnNative<F extends Format>(id: string, format: F): Promise<NativeAnswers[F] | RunningNative> {
    return this.client.call("GET", this.path("turns", id) + "?format=" + encodeURIComponent(format));
  }

  /**
   * The session's events after sequence after, in order. With follow (the
   * default) it stays live until signal aborts, and when the connection
   * drops it reconnects with Last-Event-ID, the last sequence it yielded,
   * so nothing is missed or seen twice.
   */
  async *events(options: { after?: number | undefined; follow?: boolean | undefined; signal?: AbortSignal | undefined } = {}): AsyncGenerator<Event> {
    const follow = options.follow ?? true;
    let last = options.after ?? 0;
    const retry = new Retry(this.client);
    for (;;) {
      try {
        const init: RequestInit = {
          headers: this.client.headers({ Accept: "text/event-stream", "Last-Event-ID": String(last) }),
        };
        if (options.signal) init.signal = options.signal;
        const res = await this.client.fetchImpl(this.client.url + this.path("events") + `?follow=${follow}`, init);
        if (!res.ok || !res.body) throw apiError(res.status, await res.text(), res.headers.get("Retry-After"));
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let data: string[] = [];
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let nl: number;
            while ((nl = buf.indexOf("\n")) >= 0) {
              const line = buf.slice(0, nl).replace(/\r$/, "");
              buf = buf.slice(nl + 1);
              if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
              else if (line === "" && data.length > 0) {
                const ev = JSON.parse(data.join("\n")) as Event;
                data = [];
                last = ev.seq;
                retry.progressed();
                yield ev;
              }
            }
          }
        } finally {
          // A consumer that stops early (break) must not leave the stream open.
          void reader.cancel().catch(() => {});
        }
        if (!follow) return;
        throw new Error(`event stream of ${this.id} ended`); // a drop, with its retry
      } catch (e) {
        if (options.signal?.aborted) return;
        if (e instanceof CallsheetError && !e.retryable && !e.gateway) throw e;
        if (!(await retry.wait(e instanceof CallsheetError ? e.retryAfterMs : undefined))) throw e;
        if (options.signal?.aborted) return;
      }
    }
  }

  /** The running turn's calls that wait for approval. */
  async approvals(): Promise<any[]> {
    return (await this.client.call("GET", this.path("approvals"))).approvals;
  }

  /** Decides a call that waits for approval. */
  approve(call: string, allow = true, reason?: string): Promise<unknown> {
    return this.client.call("POST", this.path("approvals", call), { decision: allow ? "allow" : "deny", ...(reason ? { reason } : {}) }, false);
  }

  /** Answers a question call with any JSON value. */
  answer(call: string, answer: unknown): Promise<unknown> {
    return this.client.call("POST", this.path("answers", call), { answer }, false);
  }

  /** The session's transcript: every turn's results and notices. */
  transcript(): Promise<{ session: string; turns: TurnAnswer[] }> {
    return this.client.call("GET", this.path("transcript"));
  }

  /** Closes the session. */
  close(reason?: string): Promise<unknown> {
    return this.client.call("POST", this.path("close"), reason ? { reason } : {}, false);
  }
}

/** A streamed turn's scheduling, set by its first post. */
export interface StreamOptions {
  /** false runs every call of the turn alone, in order. */
  parallelToolCalls?: boolean | undefined;
  /** The most parallel-safe calls of the turn that run at once. */
  cap?: number | undefined;
}

/** The node's answer to a streamed turn's batch. */
export interface BatchAnswer {
  turn: string;
  status: "open" | "ended";
  from: number;
  /** How many calls this batch holds: the next starts at from + size. */
  size: number;
  calls: number;
  parallel_tool_calls: boolean;
  cap: number;
}

/**
 * A turn whose calls are posted while the model streams (Session.openTurn,
 * Session.openTurnNative); A is what end answers. Each post names where its
 * batch starts and the end how many calls were posted, so a post retried
 * after a 503 or a dropped connection is answered from the record and a
 * lost batch is refused, never skipped; a harness that restarted and streams
 * the same response again under the same id has each batch, and the end,
 * answered from the record. Post a turn's batches one at a
 * time, in order.
 */
export class StreamedTurn<A> {
  readonly session: Session;
  /** The turn's id. */
  readonly id: string;
  /** The provider's format of the pieces; undefined: callsheet's own calls. */
  readonly format: Format | undefined;
  /** How many calls were posted: where the next batch starts. */
  calls = 0;
  parallelToolCalls: boolean | undefined;
  cap: number | undefined;
  private readonly base: string;

  /** @internal */
  constructor(session: Session, id: string, base: string, format: Format | undefined) {
    this.session = session;
    this.id = id;
    this.base = base;
    this.format = format;
  }

  /** Posts the next calls (or the provider's next piece). */
  add(next: unknown): Promise<BatchAnswer> {
    return this.post(next, {});
  }

  /** Closes the turn and waits for its answer. */
  end(): Promise<A> {
    const q = this.format ? "?format=" + encodeURIComponent(this.format) : "";
    return this.session.client.call("POST", this.base + "/end" + q, { calls: this.calls });
  }

  /** @internal */
  async post(next: unknown, o: StreamOptions): Promise<BatchAnswer> {
    let path = this.base + "/calls";
    let body: unknown;
    if (this.format) {
      const q = new URLSearchParams({ format: this.format, from: String(this.calls) });
      if (o.parallelToolCalls !== undefined) q.set("parallel_tool_calls", String(o.parallelToolCalls));
      if (o.cap !== undefined) q.set("cap", String(o.cap));
      path += "?" + q.toString();
      body = next;
    } else {
      body = {
        from: this.calls,
        calls: next,
        ...(o.parallelToolCalls !== undefined ? { parallel_tool_calls: o.parallelToolCalls } : {}),
        ...(o.cap !== undefined ? { cap: o.cap } : {}),
      };
    }
    const a: BatchAnswer = await this.session.client.call("POST", path, body);
    // The next batch starts after this one, which for a turn streamed
    // again (a restarted harness) is not the count the node holds.
    this.calls = a.from + a.size;
    this.parallelToolCalls = a.parallel_tool_calls;
    this.cap = a.cap;
    return a;
  }
}
