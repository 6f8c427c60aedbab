#!/usr/bin/env python3
"""Recompute a callsheet session's hash chain from an export, independently of callsheet.

    python3 scripts/verify-chain.py EXPORT.ndjson [--pubkey signing.pub]
    python3 scripts/verify-chain.py --canonical < values      # one JSON text per line

An export is what `replay --export` writes (or GET /v1/sessions/{s}/events?follow=false
serves): one event per line, in the session's order. The rules this script recomputes are
docs/events.md, "The hash chain": callsheet-chain-2 (an event's hash is the SHA-256 of its
line as stored; a line of the API's stream, whose members come in another order, is laid
out as stored first) and, for sessions opened before it, callsheet-chain-1 (the SHA-256
of the canonical encoding of the envelope, "The canonical encoding"). It uses Python's
standard library only (ed25519 is checked with a small implementation of RFC 8032 below),
so it shares no code with callsheet.

It prints one line per event (seq, type, hash) and exits 0 when every link matches and,
with --pubkey, every signature verifies and at least one does; else it says which event
breaks the chain, what it recorded and what was expected, and exits 1. Input that is not
an export exits 2. With --canonical it prints, for each input line, the hex of the
canonical encoding, or "error: ..." (the Go tests compare it with events.Canonical).
"""

import base64
import hashlib
import json
import re
import sys

CHAIN1, CHAIN2 = "callsheet-chain-1", "callsheet-chain-2"
ENVELOPE = ("causation", "data", "id", "prev", "seq", "session", "tenant", "time", "type")
sys.setrecursionlimit(40000)


class Obj(list):
    """A JSON object as its members in order (repeated names kept)."""


class Num:
    """A JSON number with a fraction or an exponent, kept as its text: exact, whatever its size."""

    def __init__(self, text):
        self.text = text


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def parse(raw):
    """Parse one JSON text (bytes): objects as Obj, numbers exact (int, or Num).

    Bytes that are not UTF-8 are read one by one as lone surrogates (surrogateescape);
    canonical() turns every lone surrogate into U+FFFD, as the Go encoder does."""
    text = raw.decode("utf-8", "surrogateescape")
    return json.loads(text, object_pairs_hook=Obj, parse_float=Num, parse_constant=_reject_constant)


def _clean(s):
    # Lone surrogates: \u escapes that are not half of a pair, and undecodable bytes.
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in s)


def _string(s):
    out = ['"']
    for ch in _clean(s):
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_NUMBER = re.compile(r"^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$")


def _number(v):
    """The ECMAScript Number-to-String layout of the exact value of v (int, or Num)."""
    if isinstance(v, int):
        neg, digits, exp = v < 0, str(abs(v)), 0
    else:
        m = _NUMBER.match(v.text)
        if not m:
            raise ValueError("not a JSON number: %r" % v.text)
        frac = m.group(3) or ""
        neg, digits, exp = m.group(1) == "-", m.group(2) + frac, int(m.group(4) or "0") - len(frac)
    digits = digits.lstrip("0")
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    s = stripped
    if not s:
        return "0"
    k = len(s)
    n = exp + k  # value = s * 10^(n-k)
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + s
    else:
        e = n - 1
        out = s[0] + ("." + s[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return ("-" if neg else "") + out


def _utf16(name):
    return _clean(name).encode("utf-16-be")


def canonical(v):
    """The canonical encoding of a parsed value, as a str."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, Num)):
        return _number(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Obj):
        members = sorted(v, key=lambda kv: _utf16(kv[0]))  # stable: repeated names keep their order
        return "{" + ",".join(_string(k) + ":" + canonical(x) for k, x in members) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    raise ValueError("not a JSON value: %r" % (v,))


_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _time(t):
    # The RFC 3339 text Go writes: the fraction without trailing zeros, UTC as Z.
    m = _TIME.match(t)
    if not m:
        return t
    frac = (m.group(2) or "").rstrip("0")
    if frac == ".":
        frac = ""
    zone = "Z" if m.group(3) in ("Z", "+00:00", "-00:00") else m.group(3)
    return m.group(1) + frac + zone


def envelope(ev):
    """The canonical encoding of an event's envelope: the input of its hash."""
    members = dict(ev)  # a repeated member: the last one, as Go's decoder takes it
    for name in ("id", "tenant", "session", "type"):
        if not isinstance(members.get(name), str) or not members[name]:
            raise ValueError("the event has no %s" % name)
    if not isinstance(members.get("seq"), int) or isinstance(members.get("seq"), bool) or members["seq"] < 1:
        raise ValueError("the event has no seq")
    out = Obj()
    for name in ENVELOPE:
        if name in ("causation", "prev"):
            if members.get(name):
                out.append((name, members[name]))
        elif name == "data":
            out.append((name, members.get("data")))
        elif name == "time":
            out.append((name, _time(members.get("time", "0001-01-01T00:00:00Z"))))
        else:
            out.append((name, members[name]))
    return canonical(out).encode("utf-8", "surrogatepass")


_PLAIN = re.compile(r'^[\x20-\x7e]*$')


def _stored_string(name, v):
    # Every envelope string is printable ASCII that JSON writes as it is.
    if not isinstance(v, str) or not _PLAIN.match(v) or any(c in v for c in '"\\<>&'):
        raise ValueError("the event's %s %r is not one callsheet stores" % (name, v))
    return '"' + v + '"'


def stored_line(raw, ev):
    """The event's line as callsheet stores it: raw itself for a stored line; a line of the
    API's stream (the same members in another order, data last) laid out as stored."""
    raw = raw.rstrip(b"\r")
    if raw.startswith(b'{"id":'):
        return raw
    m = dict(ev)
    at = raw.find(b',"data":')
    if at < 0 or not raw.rstrip().endswith(b"}"):
        raise ValueError("the line has no data member last")
    data = raw.rstrip()[at + len(b',"data":'):-1]
    out = '{"id":%s,"tenant":%s,"session":%s,"seq":%d,"time":%s,"type":%s' % (
        _stored_string("id", m.get("id")), _stored_string("tenant", m.get("tenant")),
        _stored_string("session", m.get("session")), m["seq"], _stored_string("time", m.get("time")),
        _stored_string("type", m.get("type")))
    for name in ("causation", "prev"):
        if m.get(name):
            out += ',"%s":%s' % (name, _stored_string(name, m[name]))
    return out.encode("ascii") + b',"data":' + data + b"}"


def event_hash(chain, raw, ev):
    if chain == CHAIN2:
        return hashlib.sha256(stored_line(raw, ev)).hexdigest()
    return hashlib.sha256(envelope(ev)).hexdigest()


def genesis(chain, tenant, session):
    doc = Obj([("chain", chain), ("session", session), ("tenant", tenant)])
    return hashlib.sha256(canonical(doc).encode("utf-8")).hexdigest()


def head_message(chain, tenant, session, seq, h):
    doc = Obj([("chain", chain), ("hash", h), ("seq", seq), ("session", session), ("tenant", tenant)])
    return canonical(doc).encode("utf-8")


# --- Ed25519 verification (RFC 8032, section 5.1.7), for --pubkey ---------------------

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_I = pow(2, (_P - 1) // 4, _P)  # sqrt(-1)


def _add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    A = (y1 - x1) * (y2 - x2) % _P
    B = (y1 + x1) * (y2 + x2) % _P
    C = 2 * t1 * t2 * _D % _P
    D = 2 * z1 * z2 % _P
    E, F, G, H = B - A, D - C, D + C, B + A
    return (E * F % _P, G * H % _P, F * G % _P, E * H % _P)


def _mul(s, p):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _equal(a, b):
    x1, y1, z1, _ = a
    x2, y2, z2, _ = b
    return (x1 * z2 - x2 * z1) % _P == 0 and (y1 * z2 - y2 * z1) % _P == 0


def _decode_point(b):
    if len(b) != 32:
        return None
    y = int.from_bytes(b, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        if sign:
            return None
        x = 0
    else:
        x = pow(x2, (_P + 3) // 8, _P)
        if (x * x - x2) % _P != 0:
            x = x * _I % _P
        if (x * x - x2) % _P != 0:
            return None
        if (x & 1) != sign:
            x = _P - x
    return (x, y, 1, x * y % _P)


_GY = 4 * pow(5, _P - 2, _P) % _P
_G = _decode_point(_GY.to_bytes(32, "little"))


def ed25519_verify(pub, msg, sig):
    if len(sig) != 64:
        return False
    a = _decode_point(pub)
    r = _decode_point(sig[:32])
    s = int.from_bytes(sig[32:], "little")
    if a is None or r is None or s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little") % _L
    return _equal(_mul(s, _G), _add(r, _mul(h, a)))


_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


def load_pubkey(path):
    """An ed25519 public key from a PEM file (PUBLIC KEY, as signing.pub and openssl write)."""
    with open(path, "rb") as f:
        text = f.read().decode("ascii", "replace")
    m = re.search(r"-----BEGIN PUBLIC KEY-----(.*?)-----END PUBLIC KEY-----", text, re.S)
    if not m:
        raise ValueError("%s holds no PEM PUBLIC KEY block" % path)
    der = base64.b64decode("".join(m.group(1).split()))
    if len(der) != 44 or not der.startswith(_SPKI_PREFIX):
        raise ValueError("%s is not an ed25519 public key" % path)
    return der[12:]


# --- The chain ------------------------------------------------------------------------


def verify(lines, pubkey=None, out=sys.stdout):
    """Check an export's chain (and signatures with pubkey); returns the exit status."""
    evs = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            v = parse(line)
        except (ValueError, RecursionError) as e:
            print("line %d: not JSON: %s" % (n, e), file=out)
            return 2
        if not isinstance(v, Obj):
            print("line %d: not an event object" % n, file=out)
            return 2
        evs.append((n, v, line))
    if not evs:
        print("the export holds no events", file=out)
        return 2
    first = dict(evs[0][1])
    tenant, session = first.get("tenant"), first.get("session")
    # A session is linked by one rule, which its genesis link names.
    chain = CHAIN2 if first.get("seq") == 1 and first.get("prev") == genesis(CHAIN2, tenant, session) else CHAIN1
    print("chain rule %s" % chain, file=out)
    hashes, failed, chained = [], False, False
    for i, (n, ev, raw) in enumerate(evs):
        try:
            h = event_hash(chain, raw, ev)
        except (ValueError, RecursionError) as e:
            print("line %d: %s" % (n, e), file=out)
            return 2
        m = dict(ev)
        hashes.append(h)
        print("seq %d %s %s" % (m["seq"], m["type"], h), file=out)
        prev = m.get("prev") or ""
        if not prev:
            if chained:
                print("seq %d: no hash link, but the events before it are chained" % m["seq"], file=out)
                failed = True
            continue
        want = genesis(chain, tenant, session) if i == 0 else hashes[i - 1]
        if not chained and i > 0:
            print("note: the chain starts at seq %d; the %d events before it are unchained" % (m["seq"], i), file=out)
        chained = True
        if prev != want:
            before = "the genesis link" if i == 0 else "the hash of seq %d" % dict(evs[i - 1][1])["seq"]
            print("seq %d: the chain breaks here: it records prev %s, and %s is %s" % (m["seq"], prev, before, want), file=out)
            failed = True
    if not chained:
        print("warning: the export is unchained: no event carries a hash link", file=out)
    signed = 0
    for i, (n, ev, _) in enumerate(evs):
        m = dict(ev)
        if m["type"] != "HeadSigned":
            continue
        d = dict(m.get("data") or [])
        seq, h = d.get("seq"), d.get("hash")
        k = next((j for j in range(i) if dict(evs[j][1])["seq"] == seq), None)
        if k is None or hashes[k] != h:
            print("seq %d: the signature is of seq %s with hash %s, which is not the hash of that event here" % (m["seq"], seq, h), file=out)
            failed = True
            continue
        if pubkey is None:
            print("seq %d: signature of seq %d not checked (no --pubkey)" % (m["seq"], seq), file=out)
            continue
        ok = d.get("key") == hashlib.sha256(pubkey).hexdigest()
        try:
            sig = base64.b64decode(d.get("signature", ""), validate=True)
        except ValueError:
            ok = False
        if ok and ed25519_verify(pubkey, head_message(chain, tenant, session, seq, h), sig):
            print("seq %d: signature of seq %d verifies" % (m["seq"], seq), file=out)
            signed = max(signed, seq)
        else:
            print("seq %d: the signature of seq %d does not verify with the given key" % (m["seq"], seq), file=out)
            failed = True
    if pubkey is not None and signed == 0:
        print("no signature verifies with the given key", file=out)
        failed = True
    last = dict(evs[-1][1])
    if failed:
        print("FAILED: session %s of tenant %s, %d events" % (session, tenant, len(evs)), file=out)
        return 1
    print("ok: session %s of tenant %s, %d events, head seq %d hash %s%s" % (
        session, tenant, len(evs), last["seq"], hashes[-1], ", signed up to seq %d" % signed if signed else ""), file=out)
    return 0


def main(argv):
    if argv[1:2] == ["--canonical"]:
        for line in sys.stdin.buffer.read().split(b"\n"):
            if not line:
                continue
            try:
                print(canonical(parse(line)).encode("utf-8", "surrogatepass").hex())
            except (ValueError, RecursionError) as e:
                print("error: %s" % e)
        return 0
    args, pubkey = argv[1:], None
    if "--pubkey" in args:
        i = args.index("--pubkey")
        if i + 1 >= len(args):
            print("--pubkey needs a file", file=sys.stderr)
            return 2
        try:
            pubkey = load_pubkey(args[i + 1])
        except (OSError, ValueError) as e:
            print("--pubkey: %s" % e, file=sys.stderr)
            return 2
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(args[0], "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        print(e, file=sys.stderr)
        return 2
    return verify(lines, pubkey)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
