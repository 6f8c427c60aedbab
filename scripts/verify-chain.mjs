#!/usr/bin/env node
// Check callsheet session exports from outside: written from docs/events.md ("The hash chain")
// and docs/audit.md ("Checkpoints and the witness") alone, with Node's crypto (SHA-256, Ed25519)
// and a standard RFC 8785 library (npm canonicalize), and nothing of callsheet's.
//
//   node scripts/verify-chain.mjs [--pubkey signing.pub]... [--witness W.ndjson] EXPORT.ndjson...
//
// An export is what `replay --export` writes: one event per line, in the session's order. A line
// of the API's events stream (GET /v1/sessions/{s}/events, the same members in another order,
// data last) is laid out as stored first. For each export it checks:
//   - the rule, callsheet-chain-2: each event's hash is the SHA-256 of its stored line; the first
//     event's prev is SHA-256 of the RFC 8785 form of {"chain","session","tenant"}; every other
//     event's prev is the hash of the line before it;
//   - every HeadSigned: it names an earlier event and that event's hash; with --pubkey its
//     Ed25519 signature of the RFC 8785 form of {"chain","hash","seq","session","tenant"} verifies
//     with one of the keys, and at least one (or a witnessed head, below) does;
//   - with --witness: every signed head the witness file holds for the session (one JSON object a
//     line, as `replay --witness` writes) verifies with a key, and the export holds its event with
//     its hash: an export that ends before a witnessed head was cut.
// It prints one line per problem and one summary line per export, and exits 0 when every export
// passes, 1 when one fails, 2 for input that is not an export. An export of a session opened
// before callsheet-chain-2 (linked by callsheet-chain-1) is reported as not checked here: its rule
// is RFC 8785 extended past I-JSON, which no standard library reproduces (scripts/verify-chain.py
// checks it).

import { createHash, createPublicKey, verify as edVerify } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const CHAIN2 = "callsheet-chain-2";

// canonicalize: from $CALLSHEET_CHAIN_DEPS (scripts/ensure-chain-deps prints it), else .tools/chain.
async function loadCanonicalize() {
  const dir = process.env.CALLSHEET_CHAIN_DEPS || new URL("../.tools/chain/", import.meta.url).pathname;
  const req = createRequire(pathToFileURL(dir.replace(/\/?$/, "/")));
  const mod = await import(pathToFileURL(req.resolve("canonicalize")).href);
  return mod.default;
}

const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");

// stored strings of the envelope are printable ASCII JSON writes as it is
const PLAIN = /^[\x20-\x7e]*$/;
function plain(name, v) {
  if (typeof v !== "string" || !PLAIN.test(v) || /["\\<>&]/.test(v)) {
    throw new Error(`the event's ${name} ${JSON.stringify(v)} is not one callsheet stores`);
  }
  return `"${v}"`;
}

// storedLine returns the event's line as stored: the line itself when it is one, else (a line of
// the API's stream) its members laid out in the stored order around its data's bytes.
function storedLine(raw, ev) {
  const open = Buffer.from('{"id":');
  if (raw.subarray(0, open.length).equals(open)) return raw;
  let end = raw.length;
  while (end > 0 && (raw[end - 1] === 0x20 || raw[end - 1] === 0x0d || raw[end - 1] === 0x09)) end--;
  const at = raw.indexOf(',"data":');
  if (at < 0 || raw[end - 1] !== 0x7d) throw new Error("the line has no data member last");
  let head = `{"id":${plain("id", ev.id)},"tenant":${plain("tenant", ev.tenant)},"session":${plain("session", ev.session)}`;
  head += `,"seq":${ev.seq},"time":${plain("time", ev.time)},"type":${plain("type", ev.type)}`;
  for (const name of ["causation", "prev"]) if (ev[name]) head += `,"${name}":${plain(name, ev[name])}`;
  return Buffer.concat([Buffer.from(head + ',"data":', "ascii"), raw.subarray(at + 8, end - 1), Buffer.from("}")]);
}

function loadKey(path) {
  const key = createPublicKey(readFileSync(path));
  if (key.asymmetricKeyType !== "ed25519") throw new Error(`${path} is not an ed25519 public key`);
  const raw = key.export({ format: "der", type: "spki" }).subarray(-32);
  return { key, id: sha256(raw) };
}

// readLines returns the non-blank lines of a file as bytes, with their numbers.
function readLines(path) {
  const buf = readFileSync(path);
  const out = [];
  let start = 0;
  for (let n = 1; start <= buf.length; n++) {
    let nl = buf.indexOf(0x0a, start);
    if (nl < 0) nl = buf.length;
    const line = buf.subarray(start, nl);
    if (line.toString("latin1").trim() !== "") out.push({ n, raw: line });
    start = nl + 1;
  }
  return out;
}

class BadInput extends Error {}

function checkExport(path, jcs, keys, witness) {
  const problems = [];
  const lines = readLines(path);
  if (lines.length === 0) throw new BadInput(`${path}: holds no events`);
  const evs = lines.map(({ n, raw }) => {
    let ev;
    try {
      ev = JSON.parse(raw.toString("utf8"));
    } catch (e) {
      throw new BadInput(`${path} line ${n}: not JSON: ${e.message}`);
    }
    if (ev === null || typeof ev !== "object" || !Number.isSafeInteger(ev.seq) || !ev.tenant || !ev.session || !ev.type) {
      throw new BadInput(`${path} line ${n}: not an event (no seq, tenant, session or type)`);
    }
    return { n, raw, ev };
  });
  const { tenant, session } = evs[0].ev;
  const genesis = sha256(jcs({ chain: CHAIN2, session, tenant }));
  if (evs[0].ev.seq !== 1 || evs[0].ev.prev !== genesis) {
    // A session opened before callsheet-chain-2, an unchained log, or one whose first event was
    // cut or changed: the callsheet-chain-1 rule is not one a standard library reproduces.
    const why = evs[0].ev.prev ? "its first event does not carry the callsheet-chain-2 genesis link" : "it is unchained";
    return { skipped: true, line: `not checked: ${path}: session ${session} of tenant ${tenant}: ${why} (scripts/verify-chain.py and replay --verify check the older rule)` };
  }
  const hashes = [];
  for (const [i, { n, raw, ev }] of evs.entries()) {
    let h;
    try {
      h = sha256(storedLine(raw, ev));
    } catch (e) {
      throw new BadInput(`${path} line ${n}: ${e.message}`);
    }
    hashes.push(h);
    const want = i === 0 ? genesis : hashes[i - 1];
    if (ev.prev !== want) {
      problems.push(`seq ${ev.seq}: the chain breaks here: it records prev ${ev.prev}, and ${i === 0 ? "the genesis link" : `the hash of seq ${evs[i - 1].ev.seq}`} is ${want}`);
    }
    if (i > 0 && ev.seq !== evs[i - 1].ev.seq + 1) problems.push(`seq ${ev.seq} follows seq ${evs[i - 1].ev.seq}`);
  }
  const hashOf = new Map(evs.map(({ ev }, i) => [ev.seq, hashes[i]]));
  const byId = new Map(keys.map((k) => [k.id, k]));
  const verifies = (p) => {
    const k = byId.get(p.key);
    if (!k || typeof p.signature !== "string") return false;
    const msg = Buffer.from(jcs({ chain: CHAIN2, hash: p.hash, seq: p.seq, session, tenant }), "utf8");
    return edVerify(null, msg, k.key, Buffer.from(p.signature, "base64"));
  };
  let signed = 0;
  for (const [i, { ev }] of evs.entries()) {
    if (ev.type !== "HeadSigned") continue;
    const d = ev.data || {};
    const k = evs.findIndex((e, j) => j < i && e.ev.seq === d.seq);
    if (k < 0 || hashes[k] !== d.hash) {
      problems.push(`seq ${ev.seq}: the signature is of seq ${d.seq} with hash ${d.hash}, which is not the hash of that event here`);
      continue;
    }
    if (keys.length === 0) continue;
    if (verifies(d)) signed = Math.max(signed, d.seq);
    else problems.push(`seq ${ev.seq}: the signature of seq ${d.seq} does not verify with a given key`);
  }
  const last = evs[evs.length - 1].ev;
  let witnessed = 0;
  for (const w of witness.filter((w) => w.tenant === tenant && w.session === session)) {
    if (w.chain !== CHAIN2) continue;
    if (keys.length > 0 && !verifies(w)) {
      problems.push(`witness line ${w.n}: the signed head of seq ${w.seq} does not verify with a given key`);
      continue;
    }
    if (w.seq > last.seq) {
      problems.push(`the export was cut: the witness holds a head signed at seq ${w.seq} (hash ${w.hash}), and the export ends at seq ${last.seq}: seq ${last.seq + 1} to ${w.seq} are missing`);
    } else if (hashOf.get(w.seq) !== w.hash) {
      problems.push(`seq ${w.seq}: the witness holds its hash as ${w.hash}, and it hashes to ${hashOf.get(w.seq)} here: it was changed after it was witnessed`);
    } else {
      witnessed = Math.max(witnessed, w.seq);
    }
  }
  if (keys.length > 0 && signed === 0 && witnessed === 0) problems.push("no signature in the export, and no witnessed head, verifies with a given key");
  const extra = (signed ? `, signed up to seq ${signed}` : "") + (witnessed ? `, witnessed up to seq ${witnessed}` : "");
  const summary = `${path}: session ${session} of tenant ${tenant}, ${evs.length} events, rule ${CHAIN2}, head seq ${last.seq} hash ${hashes[hashes.length - 1]}${extra}`;
  return { problems, links: evs.length, line: problems.length ? `FAILED: ${summary}` : `ok: ${summary}` };
}

async function main(argv) {
  const keys = [];
  const files = [];
  let witness = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--pubkey" || argv[i] === "--witness") {
      if (i + 1 >= argv.length) throw new BadInput(`${argv[i]} needs a file`);
      const file = argv[++i];
      if (argv[i - 1] === "--pubkey") keys.push(loadKey(file));
      else witness = witness.concat(readLines(file).map(({ n, raw }) => ({ ...JSON.parse(raw.toString("utf8")), n })));
    } else {
      files.push(argv[i]);
    }
  }
  if (files.length === 0) throw new BadInput("usage: node scripts/verify-chain.mjs [--pubkey KEY]... [--witness FILE] EXPORT...");
  const jcs = await loadCanonicalize();
  let failed = 0, ok = 0, skipped = 0, links = 0;
  for (const f of files) {
    const r = checkExport(f, jcs, keys, witness);
    for (const p of r.problems || []) console.log(`${f}: ${p}`);
    console.log(r.line);
    if (r.skipped) skipped++;
    else if (r.problems.length) failed++;
    else ok++;
    links += r.links || 0;
  }
  console.log(`exports: ${ok} ok, ${failed} failed, ${skipped} not checked; ${links} links recomputed`);
  return failed ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e instanceof BadInput ? e.message : e.stack || String(e));
    process.exit(2);
  },
);
