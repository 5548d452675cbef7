#!/usr/bin/env python3
"""Generates conformance/fixtures/** from tables written from the specs and the errata.

Run from anywhere: `python3 conformance/tools/gen.py`. Expected hashes and canonical forms come
from refimpl.py (our Python of TRACE Appendix B and of Relay Appendix A), never from the Rust
implementation; policy, resolve, execute and Relay expectations are written by hand from
cra-errata.md / relay-errata.md. The script deletes and rewrites every generated fixture
directory; `fixtures/interop/data/` holds the copied vectors and peer data it reads.
"""
import copy
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import refimpl as R  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, '..', 'fixtures'))
DATA = os.path.join(ROOT, 'interop', 'data')
COUNT = {}


# Every content hash computed here is remembered with its package, so a case whose ids are made
# unique (below) gets the hash of its renamed package, computed by the same reference code.
HASHED = {}
_content_hash = R.content_hash


def _remember(p):
    h = _content_hash(p)
    HASHED[h] = copy.deepcopy(p)
    return h


R.content_hash = _remember
PURE = ("content_hash", "relay_canonical", "canonical_trace", "hash_event", "verify_chain", "validate_request", "load_atlas")


def isolate(fid, v):
    """Makes a Relay case's project and package ids its own, so cases sharing one live server
    never see each other's packages (ids are part of the content hash: hashes are recomputed)."""
    tag = hashlib.sha256(fid.encode()).hexdigest()[:8]

    def ren(x):
        if isinstance(x, dict):
            return {k: ren(y) for k, y in x.items()}
        if isinstance(x, list):
            return [ren(y) for y in x]
        if isinstance(x, str):
            if x in HASHED:
                return _content_hash(ren(HASHED[x]))
            if x in ("proj_conf", "proj_conf_b"):
                return x + "_" + tag
            if x.startswith("pkg_") or x == "my-own-id-42":
                return x + "_" + tag
            if x.startswith("/v1/packages/pkg_"):
                head, rest = x[len("/v1/packages/"):].split("/", 1) if "/" in x[len("/v1/packages/"):] else (x[len("/v1/packages/"):], None)
                return "/v1/packages/" + head + "_" + tag + ("/" + rest if rest else "")
            if x.startswith("/v1/projects/proj_conf/"):
                return x.replace("/v1/projects/proj_conf/", "/v1/projects/proj_conf_%s/" % tag, 1)
        return x
    return ren(v)


def fx(fid, suite, surface, level, desc, refs, op, args, expected, setup=None, notes=None, at_seconds=None):
    if suite == "relay" and surface != "interop" and op not in PURE:
        setup, args, expected = isolate(fid, setup), isolate(fid, args), isolate(fid, expected)
    d = os.path.join(ROOT, suite, surface)
    os.makedirs(d, exist_ok=True)
    f = {"id": fid, "suite": suite, "surface": surface, "level": level, "description": desc,
         "spec_refs": refs, "setup": setup or {}, "input": dict({"operation": op, "args": args}, **({"at_seconds": at_seconds} if at_seconds is not None else {})),
         "expected": expected}
    if notes:
        f["notes"] = notes
    path = os.path.join(d, fid + '.json')
    assert not os.path.exists(path), fid
    with open(path, 'w', encoding='utf-8') as fh:
        json.dump(f, fh, indent=2, ensure_ascii=False)
        fh.write('\n')
    COUNT[surface] = COUNT.get(surface, 0) + 1


def clean():
    for suite in ('cra', 'relay'):
        p = os.path.join(ROOT, suite)
        if os.path.isdir(p):
            shutil.rmtree(p)
    ip = os.path.join(ROOT, 'interop')
    if os.path.isdir(ip):
        for name in os.listdir(ip):
            if name != 'data':
                os.remove(os.path.join(ip, name))


# ---------------------------------------------------------------- TRACE
SID = "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71"
TID = "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70"


def uid(n, kind='0'):
    return "0190f5d2-8a4e-7b3c-9d1e-%s%011d" % (kind, n)


def mk_event(seq, etype, payload, prev, ts=None, parent=None):
    e = {"trace_version": "1.0", "event_id": uid(seq + 1), "trace_id": TID,
         "span_id": uid(seq + 1, '1'), "parent_span_id": parent, "session_id": SID,
         "sequence": seq, "timestamp": ts or "2026-01-15T09:30:00.%06dZ" % (seq * 1111),
         "event_type": etype, "payload": payload, "previous_event_hash": prev}
    e["event_hash"] = R.event_hash(e)
    return e


def chain(payloads):
    out, prev = [], R.GENESIS
    for i, (t, p) in enumerate(payloads):
        e = mk_event(i, t, p, prev, parent=None if i == 0 else uid(1, '1'))
        out.append(e)
        prev = e["event_hash"]
    return out


PAYLOADS = [
    ("ascii", {"agent_id": "a", "goal": "g"}),
    ("empty-object", {}),
    ("nested", {"z": {"b": [1, 2, {"y": 1, "x": 2}], "a": None}, "a": True}),
    ("latin1", {"goal": "Résumé des tickets"}),
    ("em-dash", {"goal": "a — b"}),
    ("astral-emoji", {"goal": "launch 🚀"}),
    ("cjk", {"goal": "日本語のテキスト"}),
    ("controls", {"s": "tab\tnl\ncr\rbs\\q\"nul\u0001"}),
    ("float-small", {"x": 1e-07}),
    ("float-large", {"x": 1e16}),
    ("float-plain", {"x": 1.5, "y": -0.25}),
    ("float-1e22", {"x": 1e22}),
    ("int-big", {"n": 444444444444444444444444}),
    ("int-negative", {"n": -42, "z": 0}),
    ("bools-null", {"t": True, "f": False, "n": None}),
    ("key-order-codepoint", {"b": 1, "a": 2, "B": 3, "_": 4, "é": 5, "Z": 6}),
    ("array-order", {"list": [3, 1, 2, "b", "a"]}),
    ("empty-array-string", {"a": [], "s": ""}),
    ("deep", {"a": {"b": {"c": {"d": {"e": {"f": [[[]]]}}}}}}),
    ("slash-not-escaped", {"url": "https://x/y?z=1&w=<2>"}),
    ("unicode-key", {"clé": "valeur", "ключ": "значение"}),
    ("float-exp-neg", {"x": 2.5e-10, "y": 123456.789}),
    ("float-round", {"x": 0.1, "y": 0.30000000000000004}),
    ("int-zero-float", {"x": 0.0, "y": 100.0}),
    ("numbers-mixed-array", {"a": [1, 1.0, -1e-05, 1e+100]}),
    ("payload-with-hash-names", {"event_hash": "x", "previous_event_hash": "y"}),
]


def gen_trace():
    # canonical_trace: Appendix B json.dumps form
    for name, p in PAYLOADS:
        fx("trace-canonical-" + name, "cra", "hash-chain", "trace-core",
           "Appendix B canonical JSON of a payload: %s" % name,
           ["TRACE §4.4", "TRACE Appendix B", "errata: TRACE hash preimage"],
           "canonical_trace", {"value": p}, {"canonical": R.trace_canonical(p)})
    # hash_event: one per payload, plus field variations
    for i, (name, p) in enumerate(PAYLOADS):
        e = mk_event(i % 5, "custom.event", p, R.GENESIS if i % 5 == 0 else "ab" * 32)
        ev = {k: v for k, v in e.items() if k != "event_hash"}
        fx("trace-hash-" + name, "cra", "hash-chain", "trace-core",
           "Appendix B event hash with payload %s" % name,
           ["TRACE §4.4", "TRACE Appendix B", "TRACE §4.2"], "hash_event", {"event": ev},
           {"event_hash": e["event_hash"]})
    base = mk_event(3, "action.executed", {"action_id": "ticket.lookup", "execution_id": uid(9), "duration_ms": 12}, "cd" * 32, parent=uid(2, '1'))
    variants = {
        "parent-null": dict(parent_span_id=None),
        "parent-absent": "drop:parent_span_id",
        "parent-set": dict(parent_span_id=uid(7, '1')),
        "sequence-large": dict(sequence=123456789012),
        "timestamp-as-written": dict(timestamp="2026-01-15T09:30:00.123Z"),
        "timestamp-offset": dict(timestamp="2026-01-15T10:30:00.123456+01:00"),
        "unknown-event-type": dict(event_type="x.vendor.custom"),
        "non-v7-ids": dict(event_id="01234567-89ab-cdef-0123-456789abcdef"),
        "trace-version": dict(trace_version="1.0"),
        "extra-field-not-hashed": dict(x_extra="ignored"),
    }
    for name, change in variants.items():
        e = {k: v for k, v in base.items() if k != "event_hash"}
        if change == "drop:parent_span_id":
            del e["parent_span_id"]
        else:
            e.update(change)
        h = R.event_hash(e)
        fx("trace-hash-field-" + name, "cra", "hash-chain", "trace-core",
           "Appendix B hash: %s" % name.replace('-', ' '),
           ["TRACE §4.4", "TRACE Appendix B", "TRACE §4.2.1"], "hash_event", {"event": e},
           {"event_hash": h})
    # spec single-event example (errata)
    ex = {"trace_version": "1.0", "event_id": "01234567-89ab-cdef-0123-456789abcdef",
          "trace_id": "11111111-1111-1111-1111-111111111111", "span_id": "22222222-2222-2222-2222-222222222222",
          "parent_span_id": None, "session_id": "33333333-3333-3333-3333-333333333333", "sequence": 0,
          "timestamp": "2024-12-28T12:00:00.000000Z", "event_type": "session.started",
          "payload": {"agent_id": "test-agent", "goal": "Test session"}, "previous_event_hash": R.GENESIS}
    assert R.event_hash(ex) == "f5b4945b0bb5f9adc249a7062a5bf1bbcf6f095edbd8fb1503bbc2d5a05d19c5"
    fx("trace-hash-spec-example", "cra", "hash-chain", "trace-core",
       "The event of the spec's conformance examples hashes to the errata's value",
       ["TRACE Appendix B", "TRACE §4.4.1"], "hash_event", {"event": ex}, {"event_hash": R.event_hash(ex)})
    # negatives: a required field missing is a malformed event
    for f in ["event_id", "payload", "sequence", "timestamp", "session_id"]:
        e = {k: v for k, v in base.items() if k not in ("event_hash", f)}
        fx("trace-hash-missing-" + f.replace('_', '-'), "cra", "hash-chain", "trace-core",
           "An event without %s cannot be hashed: malformed_event" % f,
           ["TRACE §4.2", "errata: TRACE verification"], "hash_event", {"event": e},
           {"error": "malformed_event"})

    # verify
    good = chain([("session.started", {"agent_id": "a", "goal": "g"}),
                  ("carp.request.received", {"request_id": uid(50), "operation": "resolve", "goal": "Résumé 🚀"}),
                  ("policy.evaluated", {"policy_id": "default_deny", "result": "deny", "action_id": "x.y"}),
                  ("carp.resolution.completed", {"resolution_id": uid(51), "decision_type": "deny", "allowed_count": 0, "denied_count": 1, "x": 1.5e-07}),
                  ("session.ended", {"reason": "done", "duration_ms": 10})])
    V = ["TRACE §4.4.2", "errata: TRACE verification"]
    for n in range(1, 6):
        fx("verify-valid-%d-events" % n, "cra", "verify", "trace-core", "A valid chain of %d events verifies" % n,
           V + ["TRACE §4.4.1"], "verify_chain", {"events": good[:n]},
           {"valid": True, "events": n, "first_error": {"$absent": True}})
    fx("verify-unknown-event-type", "cra", "verify", "trace-core", "A verifier accepts unknown event types",
       V + ["errata: unknown event types"], "verify_chain",
       {"events": chain([("session.started", {}), ("x.vendor.thing", {"a": 1})])}, {"valid": True})

    def bad(name, desc, events, code, seq, refs=V, line=None):
        exp = {"valid": False, "first_error": {"code": code, "sequence": seq}}
        if line is not None:
            exp["first_error"]["line"] = line
        fx("verify-" + name, "cra", "verify", "trace-core", desc, refs, "verify_chain", {"events": events}, exp)

    def tamper(i, **kw):
        c = copy.deepcopy(good)
        c[i].update(kw)
        return c

    # genesis rules: event 0 is checked (errata)
    g = copy.deepcopy(good)
    g[0]["previous_event_hash"] = "ab" * 32
    g[0]["event_hash"] = R.event_hash(g[0])
    bad("genesis-previous-not-zero", "Event 0 must link to 64 zeros", g[:1], "invalid_genesis", 0, V + ["TRACE §4.4.1"])
    g = copy.deepcopy(good[:1])
    g[0]["sequence"] = 1
    g[0]["event_hash"] = R.event_hash(g[0])
    bad("genesis-sequence-not-zero", "Event 0 must have sequence 0", g, "sequence_gap", 0, V + ["TRACE §4.4.1"])
    bad("genesis-hash-tampered", "A tampered event 0 is detected (the spec's loop skips it; errata)",
        tamper(0, payload={"agent_id": "b", "goal": "g"}), "hash_mismatch", 0, V + ["TRACE §4.4.1"])
    bad("genesis-event-hash-wrong", "Event 0 with a wrong event_hash", tamper(0, event_hash="00" * 32), "hash_mismatch", 0, V + ["TRACE §4.4.1"])
    for f, val in [("trace_version", "1.1"), ("event_id", uid(99)), ("trace_id", uid(98)), ("span_id", uid(97, '1')),
                   ("parent_span_id", uid(96, '1')), ("session_id", uid(95)), ("timestamp", "2026-01-15T09:30:00.999999Z"),
                   ("event_type", "policy.violated"), ("payload", {"policy_id": "p", "result": "allow", "action_id": "x.y"})]:
        bad("tampered-" + f.replace('_', '-'), "Changing %s of event 2 breaks its hash" % f, tamper(2, **{f: val}),
            "hash_mismatch", 2, V + ["TRACE §4.4"])
    bad("tampered-payload-float", "A float re-rendered differently breaks the hash", tamper(3, payload=dict(good[3]["payload"], x=1.5e-7 * 10)), "hash_mismatch", 3)
    c = copy.deepcopy(good)
    c[2]["previous_event_hash"] = "ef" * 32
    c[2]["event_hash"] = R.event_hash(c[2])
    bad("chain-broken-link", "previous_event_hash not the previous event's hash", c, "chain_broken", 2)
    c = copy.deepcopy(good)
    del c[2]
    bad("event-removed", "Removing an event shows as a sequence gap", c, "sequence_gap", 2)
    c = copy.deepcopy(good)
    c[1], c[2] = c[2], c[1]
    bad("events-swapped", "Swapped events are detected", c, "sequence_gap", 1)
    c = copy.deepcopy(good[:3])
    c.append(copy.deepcopy(good[2]))
    bad("event-duplicated", "A duplicated event is detected", c, "sequence_gap", 3)
    c = copy.deepcopy(good)
    c[3]["sequence"] = 4
    c[3]["event_hash"] = R.event_hash(c[3])
    bad("sequence-gap-resealed", "A sequence gap with a re-sealed hash", c, "sequence_gap", 3)
    c = copy.deepcopy(good)
    c[1]["event_hash"] = c[1]["event_hash"].upper()
    bad("hash-uppercase", "event_hash must be the lowercase hex digest", c, "hash_mismatch", 1)
    # §4.2 field rules (issue 22 item 11): each chain is re-sealed after the change, so its hashes
    # and links are right and only the field rule can fail.
    def resealed(c):
        prev = R.GENESIS
        for e in c:
            e["previous_event_hash"] = prev
            e["event_hash"] = R.event_hash(e)
            prev = e["event_hash"]
        return c

    F = V + ["TRACE §4.2", "TRACE §4.2.1"]

    def field_bad(name, desc, changes, code, seq, field):
        c = copy.deepcopy(good)
        for i, change in changes:
            c[i].update(change)
        fx("verify-field-" + name, "cra", "verify", "trace-core", desc, F, "verify_chain", {"events": resealed(c)},
           {"valid": False, "first_error": {"code": code, "sequence": seq, "field": field}})

    field_bad("trace-version-2", "A linked chain whose event 2 says trace_version 2.0 is invalid",
              [(2, {"trace_version": "2.0"})], "invalid_trace_version", 2, "trace_version")
    field_bad("event-id-not-uuid", "A linked chain with an event_id that is not a UUID is invalid",
              [(3, {"event_id": "evt-3"})], "invalid_id", 3, "event_id")
    field_bad("trace-id-uppercase", "An uppercase UUID is not canonical (errata: lowercase hex)",
              [(1, {"trace_id": TID.upper()})], "invalid_id", 1, "trace_id")
    field_bad("parent-span-id-not-uuid", "A parent_span_id that is neither a UUID nor null is invalid",
              [(2, {"parent_span_id": "span-1"})], "invalid_id", 2, "parent_span_id")
    field_bad("session-id-not-uuid", "A chain whose session_id is not a UUID is invalid from event 0",
              [(i, {"session_id": "sess-1"}) for i in range(5)], "invalid_id", 0, "session_id")
    field_bad("session-mixed", "A linked chain holding two sessions is invalid where the second begins",
              [(i, {"session_id": uid(95)}) for i in (3, 4)], "session_mixed", 3, "session_id")
    field_bad("timestamp-no-zone", "A timestamp without a zone is not a §4.2 timestamp",
              [(4, {"timestamp": "2026-01-15T09:30:00.004444"})], "invalid_timestamp", 4, "timestamp")
    field_bad("timestamp-not-an-instant", "A timestamp naming no real instant (30 February) is invalid",
              [(1, {"timestamp": "2026-02-30T09:30:00.001111Z"})], "invalid_timestamp", 1, "timestamp")
    c = copy.deepcopy(good)
    for e, t in zip(c, ["2026-01-15T09:30:00+00:00", "2026-01-15T10:30:00.001111+01:00", "2026-01-15T09:30:00.0022Z",
                        "2026-01-15T04:30:00.003333333-05:00", "2026-01-15T09:30:00.004444Z"]):
        e["timestamp"] = t
    fx("verify-valid-offset-timestamps", "cra", "verify", "trace-core",
       "RFC 3339 timestamps with a +00:00 or other offset and any fraction digits verify",
       F, "verify_chain", {"events": resealed(c)}, {"valid": True, "events": 5})
    c = copy.deepcopy(good)
    for e in c:
        e.update(trace_id="11111111-1111-1111-1111-111111111111", session_id="33333333-3333-3333-3333-333333333333")
    c[0]["event_id"] = "01234567-89ab-cdef-0123-456789abcdef"
    fx("verify-valid-any-uuid-version", "cra", "verify", "trace-core",
       "Canonical UUIDs of any version verify (errata: the spec's examples are not v7)",
       F + ["errata: TRACE verification"], "verify_chain", {"events": resealed(c)}, {"valid": True, "events": 5})
    # malformed lines
    lines = [json.dumps(e) for e in good]
    def badl(name, desc, ls, seq):
        fx("verify-malformed-" + name, "cra", "verify", "trace-core", desc, V + ["CRA §6.2"], "verify_chain",
           {"lines": ls}, {"valid": False, "first_error": {"code": "malformed_event", "sequence": seq}})
    badl("not-json", "A line that is not JSON", lines[:2] + ["{not json"], 2)
    badl("truncated", "A truncated line", lines[:1] + [lines[1][:40]], 1)
    e = dict(good[1]); del e["event_hash"]
    badl("missing-event-hash", "A line missing event_hash", lines[:1] + [json.dumps(e)], 1)
    e = dict(good[1]); e["sequence"] = "1"
    badl("sequence-string", "sequence must be an integer", lines[:1] + [json.dumps(e)], 1)
    badl("array-line", "A line holding an array", lines[:1] + ["[1,2]"], 1)
    badl("duplicate-keys", "Duplicate keys refused (errata: stricter than Python)",
         lines[:1] + [lines[1][:-1] + ', "sequence": 1}'], 1)
    fx("verify-all-errors-listed", "cra", "verify", "trace-core", "The all-errors mode lists every failure",
       V, "verify_chain", {"events": tamper(1, payload={"a": 1})[:2] + tamper(2, payload={"b": 2})[2:3], "all_errors": True},
       {"valid": False, "findings": {"$contains": [{"code": "hash_mismatch", "sequence": 1}]}})
    fx("verify-first-error-only", "cra", "verify", "trace-core", "The default mode reports exactly the first failure",
       V, "verify_chain", {"events": tamper(4, payload={})[:1] + tamper(1, payload={"z": 0})[1:]},
       {"valid": False, "findings": {"$len": 1}, "first_error": {"sequence": 1, "code": "hash_mismatch"}})
    fx("verify-appendix-b-chain", "cra", "verify", "trace-core", "The errata's Appendix B vector chain verifies",
       V + ["TRACE Appendix B"], "verify_chain",
       {"lines": [l.rstrip('\n') for l in open(os.path.join(DATA, 'trace-chain-appendix-b.jsonl'), encoding='utf-8') if l.strip()]},
       {"valid": True, "events": 5})


NOW = "2026-04-20T12:00:00Z"


def I_(t):
    """Matches an RFC 3339 string naming the same instant (an implementation may re-render it)."""
    return {"$instant": t}


PROJ = {"project_id": "proj_conf", "name": "Conformance"}


# ---------------------------------------------------------------- Relay wire / content hash
def pkg(**kw):
    p = {"package_id": "pkg_" + "0" * 31 + "1", "project_id": "proj_conf", "relay_version": "0.1",
         "title": "A package", "status": "complete", "package_type": "standard", "review_type": "none",
         "created_at": "2026-04-18T20:00:00Z", "created_by": {"id": "jordan", "type": "human", "session_id": None}}
    p.update(kw)
    return p


CANON_CASES = [
    ("key-sort-bytes", {"b": 1, "a": 2, "A": 3, "_": 4}),
    ("key-sort-utf8-vs-utf16", {"\ue000": 1, "\U0001f600": 2, "a": 3}),
    ("null-member-dropped", {"a": None, "b": 1}),
    ("null-deep-dropped", {"o": {"x": None, "y": {"z": None}}}),
    ("null-in-array-kept", {"a": [None, 1, None]}),
    ("number-one-point-zero", {"n": 1.0}),
    ("number-1e21", {"n": 1e21}),
    ("number-1e20", {"n": 1e20}),
    ("number-small", {"n": 1e-7}),
    ("number-0-000001", {"n": 0.000001}),
    ("number-negative-zero", {"n": -0.0}),
    ("number-fraction", {"n": 0.1, "m": -2.5}),
    ("number-large-exp", {"n": 1.5e300}),
    ("raw-utf8", {"s": "Résumé — 日本 🚀"}),
    ("escapes-short", {"s": "a\"b\\c\nd\te\bf\fg\rh"}),
    ("escapes-control-hex", {"s": "\u0000\u001f\u0007"}),
    ("slash-raw", {"s": "a/b"}),
    ("del-raw", {"s": "\u007f"}),
    ("empty-containers", {"a": [], "o": {}, "s": ""}),
    ("array-order-kept", {"a": [3, 2, 1]}),
    ("top-level-array", [{"b": 1, "a": None}, None]),
    ("booleans", {"t": True, "f": False}),
    ("integer-big", {"n": 9007199254740991}),
]


def gen_relay_wire():
    refs = ["Relay Appendix A", "errata: Relay canonical JSON"]
    for name, v in CANON_CASES:
        fx("relay-canonical-" + name, "relay", "relay-wire", "L0", "Relay canonical JSON: " + name.replace('-', ' '),
           refs, "relay_canonical", {"value": v}, {"canonical": R.relay_canonical(v)})
    vec = json.load(open(os.path.join(DATA, 'relay-content-hash.json'), encoding='utf-8'))
    for v in vec["canonical_vectors"]:
        fx("relay-vector-" + v["id"], "relay", "relay-wire", "L0", "Errata canonical vector " + v["id"] + ": " + v["note"],
           refs, "relay_canonical", {"value": v["input"]}, {"canonical": v["canonical"]})
    # unknown and x-* fields survive a deposit/pull round trip: see deposit surface
    H = ["Relay §6.6", "errata: Relay content hash"]
    for v in vec["package_vectors"]:
        fx("content-hash-vector-" + v["id"], "relay", "content-hash", "L1", "Errata package vector " + v["id"],
           H, "content_hash", {"package": v["package"]}, {"content_hash": v["content_hash"]})
    variants = {
        "minimal": pkg(),
        "with-tags": pkg(tags=["a", "b"]),
        "tags-empty-differs": pkg(tags=[]),
        "session-id-set": pkg(created_by={"id": "bot", "type": "agent", "session_id": "sess_1"}),
        "x-field": pkg(**{"x-team": "blue"}),
        "unknown-field": pkg(future_field={"k": [1, 2]}),
        "content-hash-key-removed": dict(pkg(), content_hash="sha256:" + "0" * 64),
        "status-draft": pkg(status="draft"),
        "deliverables": pkg(deliverables=[{"path": "docs/a.md", "type": "md", "hash": "sha256:abc", "size_bytes": 10}]),
        "significance-float": pkg(significance=5.0),
        "unicode-title": pkg(title="Résumé — 🚀"),
        "nulls-optional": pkg(parent_package_id=None, topic=None, estimated_next_actor=None),
        "attribution-changed": pkg(created_by={"id": "jordan2", "type": "human"}),
        "timestamp-as-received": pkg(created_at="2026-04-18T20:00:00.000Z"),
    }
    for name, p in variants.items():
        fx("content-hash-" + name, "relay", "content-hash", "L1", "Content hash of a package: " + name.replace('-', ' '),
           H + ["Relay §5.4"], "content_hash", {"package": p}, {"content_hash": R.content_hash(p)})
    fx("content-hash-not-an-object", "relay", "content-hash", "L1", "Only a package object has a content hash: anything else is invalid_schema",
       H, "content_hash", {"package": ["not", "a", "package"]}, {"error": "invalid_schema"})
    for name, change, ptr in [("package-type-outside-x", {"package_type": "custom"}, "/package_type"),
                              ("created-by-missing-type", {"created_by": {"id": "jordan"}}, "/created_by/type"),
                              ("status-unknown", {"status": "done"}, "/status"),
                              ("relay-version-missing", {"relay_version": None}, "/relay_version")]:
        p = {k: v for k, v in dict(pkg(), **change).items() if v is not None}
        fx("relay-wire-invalid-" + name, "relay", "relay-wire", "L1", "A package violating the §6 wire format is refused at %s" % ptr,
           ["Relay §6", "Relay §6.3", "Relay §6.2"], "deposit", {"package": p},
           {"error": "invalid_schema", "status": 400, "details": {"errors": {"$contains": [{"pointer": ptr}]}}},
           setup={"now": NOW, "id_seed": 1, "projects": [PROJ]})
    # negative: the hash differs when anything hashed differs
    a, b = pkg(tags=[]), pkg()
    assert R.content_hash(a) != R.content_hash(b)
    fx("content-hash-not-default-filled", "relay", "content-hash", "L1",
       "Defaults are not filled before hashing: omitting tags is not the same as tags: []",
       H, "content_hash", {"package": b}, {"content_hash": {"$eq": R.content_hash(b)}})


# ---------------------------------------------------------------- Relay operations
PROJ = {"project_id": "proj_conf", "name": "Conformance"}
ACTOR = {"id": "jordan", "type": "human", "session_id": None}


def p_(n, **kw):
    p = {"package_id": "pkg_%032x" % n, "project_id": "proj_conf", "relay_version": "0.1",
         "title": "Package %d" % n, "status": "complete", "package_type": "standard", "review_type": "none",
         "created_at": "2026-04-%02dT10:00:00Z" % (1 + n % 28), "created_by": ACTOR}
    p.update(kw)
    return p


def fact(subject, predicate, value, valid_from, **kw):
    f = {"project_id": "proj_conf", "subject": subject, "predicate": predicate, "value": value, "valid_from": valid_from}
    f.update(kw)
    return f




def gen_relay_package_ids():
    """Relay §6: package_id is unique within its project, so two projects may hold one id (issue
    22 B.13). The runner's token reads every project, so an unscoped route is ambiguous."""
    PB = {"project_id": "proj_conf_b", "name": "Second"}
    a = p_(70, status="draft")
    b = p_(70, status="draft", project_id="proj_conf_b", title="The second project's package")
    S1 = {"now": NOW, "id_seed": 1, "projects": [PROJ, PB], "packages": [a]}
    S2 = dict(S1, packages=[a, b])
    refs = ["Relay §6.1", "Relay §8.2", "specs/relay.md: HTTP wire shapes"]
    fx("deposit-same-id-in-another-project", "relay", "deposit", "L1",
       "A package id unique within its project is accepted although another project holds it",
       ["Relay §6.1", "Relay §8.1"], "deposit", {"package": b},
       {"package_id": b["package_id"], "project_id": "proj_conf_b", "content_hash": R.content_hash(b)}, setup=S1)
    fx("deposit-same-id-in-another-project-idempotent", "relay", "deposit", "L1",
       "Re-depositing the second project's package is idempotent there, the first project's untouched",
       ["Relay §6.1", "errata: L1 idempotent deposit"], "deposit", {"package": b},
       {"project_id": "proj_conf_b", "content_hash": R.content_hash(b), "error": {"$absent": True}}, setup=S2)
    fx("pull-specific-ambiguous-id", "relay", "pull", "L0",
       "pull specific of an id two readable projects hold, without a project: 409 ambiguous_package_id", refs,
       "pull", {"mode": "specific", "package_id": a["package_id"]}, {"error": "ambiguous_package_id", "status": 409}, setup=S2)
    fx("pull-specific-in-first-project", "relay", "pull", "L0",
       "pull specific naming the project returns that project's package", refs,
       "pull", {"mode": "specific", "package_id": a["package_id"], "project_id": "proj_conf"},
       {"project_id": "proj_conf", "title": a["title"], "content_hash": R.content_hash(a)}, setup=S2)
    fx("pull-specific-in-second-project", "relay", "pull", "L0",
       "pull specific naming the other project returns its own package with the same id", refs,
       "pull", {"mode": "specific", "package_id": b["package_id"], "project_id": "proj_conf_b"},
       {"project_id": "proj_conf_b", "title": b["title"], "content_hash": R.content_hash(b)}, setup=S2)
    fx("pull-specific-not-in-named-project", "relay", "pull", "L0",
       "pull specific naming a project that does not hold the id: 404 package_not_found", refs,
       "pull", {"mode": "specific", "package_id": a["package_id"], "project_id": "proj_conf_b"},
       {"error": "package_not_found", "status": 404}, setup=S1)
    fx("pull-specific-one-holder-unscoped", "relay", "pull", "L0",
       "pull specific without a project when one project holds the id returns it", refs,
       "pull", {"mode": "specific", "package_id": a["package_id"]},
       {"project_id": "proj_conf", "content_hash": R.content_hash(a)}, setup=S1)
    RV = ["Relay §5.3", "Relay §8.5", "Relay §6.1"]
    fx("review-flag-ambiguous-id", "relay", "review", "L3",
       "Flagging an id two projects hold, without a project: 409 ambiguous_package_id, nothing changes", RV,
       "flag_for_review", {"package_id": a["package_id"], "review_type": "human"},
       {"error": "ambiguous_package_id", "status": 409}, setup=S2)
    flagged_b = dict(b, status="awaiting_review", review_type="human")
    fx("review-flag-in-named-project", "relay", "review", "L3",
       "Flagging in a named project flags that project's package only", RV,
       "flag_for_review", {"package_id": b["package_id"], "project_id": "proj_conf_b", "review_type": "human"},
       {"project_id": "proj_conf_b", "status": "awaiting_review", "content_hash": R.content_hash(flagged_b)}, setup=S2)
    fx("review-flag-other-project-untouched", "relay", "review", "L3",
       "A flag in one project leaves the other project's package with the same id as it was", RV,
       "pull", {"mode": "specific", "package_id": a["package_id"], "project_id": "proj_conf"},
       {"status": "draft", "content_hash": R.content_hash(a)},
       setup=dict(S2, steps=[{"operation": "flag_for_review",
                              "args": {"package_id": b["package_id"], "project_id": "proj_conf_b", "review_type": "human"}}]))
    fx("review-complete-in-named-project", "relay", "review", "L3",
       "A review in a named project completes that project's package", RV,
       "review", {"package_id": b["package_id"], "project_id": "proj_conf_b", "outcome": "complete"},
       {"project_id": "proj_conf_b", "status": "complete", "content_hash": R.content_hash(dict(flagged_b, status="complete"))},
       setup=dict(S2, steps=[{"operation": "flag_for_review",
                              "args": {"package_id": b["package_id"], "project_id": "proj_conf_b", "review_type": "human"}}]))


def gen_relay_ops():
    S = {"now": NOW, "id_seed": 1, "projects": [PROJ]}
    D = ["Relay §8.1", "Relay §6"]
    ok = p_(1)
    fx("deposit-minimal", "relay", "deposit", "L1", "Depositing a valid package returns it with its content hash",
       D + ["Relay §6.6"], "deposit", {"package": ok}, dict(ok, content_hash=R.content_hash(ok)), setup=S)
    withx = p_(2, **{"x-team": "blue", "future": {"k": 1}})
    fx("deposit-preserves-unknown-fields", "relay", "deposit", "L1", "Unknown and x-* fields are preserved and hashed",
       D + ["Relay §12.1", "Relay §6"], "deposit", {"package": withx}, dict(withx, content_hash=R.content_hash(withx)), setup=S)
    xt = p_(3, package_type="x-model-eval")
    fx("deposit-x-package-type", "relay", "deposit", "L1", "Custom package types in the x-* namespace are accepted",
       D + ["Relay §12.2", "Relay §6.3"], "deposit", {"package": xt}, {"package_type": "x-model-eval", "content_hash": R.content_hash(xt)}, setup=S)
    anyid = p_(4, package_id="my-own-id-42")
    fx("deposit-any-unique-id", "relay", "deposit", "L1", "Any string unique within the project is accepted as package_id",
       D + ["Relay §6.1"], "deposit", {"package": anyid}, {"package_id": "my-own-id-42", "content_hash": R.content_hash(anyid)}, setup=S)
    fx("deposit-idempotent-same-content", "relay", "deposit", "L1", "Re-depositing identical content returns the stored package",
       D + ["errata: L1 idempotent deposit"], "deposit", {"package": ok}, {"package_id": ok["package_id"], "content_hash": R.content_hash(ok), "error": {"$absent": True}},
       setup=dict(S, packages=[ok]))
    fx("deposit-duplicate-different-content", "relay", "deposit", "L1", "Same package_id, different content: 409 duplicate_package_id",
       D + ["errata: L1 idempotent deposit"], "deposit", {"package": p_(1, title="Changed")}, {"error": "duplicate_package_id", "status": 409},
       setup=dict(S, packages=[ok]))
    inv = [
        ("missing-title", "drop", "title", "/title"),
        ("title-too-long", "set", ("title", "x" * 201), "/title"),
        ("title-empty", "set", ("title", ""), "/title"),
        ("bad-status", "set", ("status", "published"), "/status"),
        ("bad-package-type", "set", ("package_type", "memo"), "/package_type"),
        ("bad-review-type", "set", ("review_type", "robot"), "/review_type"),
        ("bad-relay-version", "set", ("relay_version", "0.2"), "/relay_version"),
        ("missing-created-by", "drop", "created_by", "/created_by"),
        ("bad-actor-type", "set", ("created_by", {"id": "x", "type": "alien"}), "/created_by/type"),
        ("missing-project-id", "drop", "project_id", "/project_id"),
        ("bad-created-at", "set", ("created_at", "yesterday"), "/created_at"),
        ("created-at-not-utc", "set", ("created_at", "2026-04-18T22:00:00+02:00"), "/created_at"),
        ("created-at-no-zone", "set", ("created_at", "2026-04-18T20:00:00"), "/created_at"),
        ("significance-out-of-range", "set", ("significance", 11), "/significance"),
        ("deliverable-without-path", "set", ("deliverables", [{"type": "md"}]), "/deliverables/0/path"),
        ("tags-not-strings", "set", ("tags", [1]), "/tags/0"),
    ]
    for name, how, what, ptr in inv:
        p = p_(10)
        if how == "drop":
            del p[what]
        else:
            p[what[0]] = what[1]
        fx("deposit-invalid-" + name, "relay", "deposit", "L1", "An invalid package is refused with invalid_schema naming %s" % ptr,
           D + ["errata: Relay operations errors"], "deposit", {"package": p, "project_id": "proj_conf"},
           {"error": "invalid_schema", "status": 400, "details": {"errors": {"$contains": [{"pointer": ptr}]}}}, setup=S)
    fx("deposit-archived-project", "relay", "deposit", "L1", "Depositing into an archived project: 403 project_archived",
       D + ["errata: Relay operations errors"], "deposit", {"package": p_(11)}, {"error": "project_archived", "status": 403},
       setup=dict(S, projects=[dict(PROJ, archived_at="2026-04-19T00:00:00Z")]))

    # pull
    pk = [p_(i, created_at="2026-04-%02dT10:00:00Z" % i, open_questions=["q%d" % i] if i % 2 else []) for i in range(1, 8)]
    SP = dict(S, packages=pk)
    P = ["Relay §8.2"]
    fx("pull-specific", "relay", "pull", "L0", "pull specific returns the package with its content hash", P, "pull",
       {"mode": "specific", "package_id": pk[2]["package_id"]}, dict(pk[2], content_hash=R.content_hash(pk[2])), setup=SP)
    fx("pull-specific-unknown", "relay", "pull", "L0", "pull of an unknown package: 404 package_not_found", P + ["errata: Relay operations errors"],
       "pull", {"mode": "specific", "package_id": "pkg_nope"}, {"error": "package_not_found", "status": 404}, setup=SP)
    fx("pull-latest-default-limit", "relay", "pull", "L0", "pull latest defaults to 5 packages, newest first", P, "pull",
       {"mode": "latest", "project_id": "proj_conf"},
       {"packages": [{"package_id": pk[i]["package_id"]} for i in (6, 5, 4, 3, 2)]}, setup=SP)
    fx("pull-latest-limit-2", "relay", "pull", "L0", "pull latest honours limit", P, "pull",
       {"mode": "latest", "project_id": "proj_conf", "limit": 2},
       {"packages": [{"package_id": pk[6]["package_id"]}, {"package_id": pk[5]["package_id"]}]}, setup=SP)
    fx("pull-latest-empty-project", "relay", "pull", "L0", "pull latest of an empty project is an empty list", P, "pull",
       {"mode": "latest", "project_id": "proj_conf"}, {"packages": []}, setup=S)
    fx("pull-roundtrip-unknown-fields", "relay", "pull", "L0", "Unknown and x-* fields are returned as deposited", P + ["Relay §6", "Relay §12.1"],
       "pull", {"mode": "specific", "package_id": withx["package_id"]}, {"x-team": "blue", "future": {"k": 1}, "content_hash": R.content_hash(withx)},
       setup=dict(S, packages=[withx]))
    rel = [p_(20, title="Vector search latency", content_md="We measured retrieval latency of the vector index."),
           p_(21, title="Dashboard colours", content_md="The dashboard uses a blue theme."),
           p_(22, title="Retrieval benchmark", content_md="Recall at five for retrieval improved.")]
    fx("pull-relevant-top-k", "relay", "pull", "L0", "pull relevant returns the matching packages (set, not order)", P + ["errata: search"],
       "pull", {"mode": "relevant", "project_id": "proj_conf", "query": "retrieval", "limit": 2},
       {"packages": {"$unordered": [{"package_id": rel[0]["package_id"]}, {"package_id": rel[2]["package_id"]}]}}, setup=dict(S, packages=rel))

    # orient
    O = ["Relay §8.3", "errata: OrientationBundle"]
    fx("orient-shape", "relay", "orient", "L0", "orient returns the OrientationBundle shape", O, "orient",
       {"project_id": "proj_conf"},
       {"project": {"project_id": "proj_conf"}, "recent_packages": {"$any": "array"}, "active_facts": {"$any": "array"},
        "open_questions": {"$any": "array"}, "window_days": 14, "generated_at": {"$any": "string"}}, setup=SP)
    fx("orient-open-questions-deduplicated", "relay", "orient", "L0", "open questions are gathered from recent packages, deduplicated", O, "orient",
       {"project_id": "proj_conf", "window_days": 3650},
       {"open_questions": {"$unordered": ["shared", "only-a"]}},
       setup=dict(S, packages=[p_(30, open_questions=["shared", "only-a"]), p_(31, open_questions=["shared"])]))
    fx("orient-window", "relay", "orient", "L0", "recent packages are those inside the window", O, "orient",
       {"project_id": "proj_conf", "window_days": 4},
       {"window_days": 4, "recent_packages": {"$unordered": [{"package_id": pk[6]["package_id"]}]}},
       setup=dict(S, packages=[dict(x, created_at=x["created_at"].replace("2026-04-0", "2026-04-1")) for x in pk]), at_seconds=0)
    fx("orient-active-facts-only", "relay", "orient", "L2", "orient lists only current facts", O + ["Relay §7.3"], "orient",
       {"project_id": "proj_conf"},
       {"active_facts": {"$unordered": [{"subject": "svc", "predicate": "status", "value": "green"}]}},
       setup=dict(S, facts=[fact("svc", "status", "red", "2026-04-01T00:00:00Z"), fact("svc", "status", "green", "2026-04-10T00:00:00Z")]))
    fx("orient-unknown-project", "relay", "orient", "L0", "orient of an unknown project: 404", O, "orient",
       {"project_id": "proj_missing"}, {"error": {"$any": "string"}, "status": 404}, setup=S)

    # facts
    F = ["Relay §7.3", "Relay §8.6", "Relay §10.1"]
    f1 = fact("longmemeval_s", "recall_any_at_5", "95.0", "2026-04-01T12:00:00Z")
    f2 = fact("longmemeval_s", "recall_any_at_5", "97.0", "2026-04-10T12:00:00Z")
    SF = dict(S, facts=[f1])
    fx("fact-assert-new", "relay", "facts-supersession", "L2", "assert_fact inserts a current fact (valid_to null)", F, "assert_fact", f1,
       {"subject": "longmemeval_s", "predicate": "recall_any_at_5", "value": "95.0", "valid_from": I_(f1["valid_from"]), "valid_to": None,
        "fact_id": {"$any": "string"}, "created_at": {"$any": "string"}}, setup=S)
    fx("fact-supersede-closes-old", "relay", "facts-supersession", "L2", "Supersession sets the old fact's valid_to to the new valid_from", F,
       "get_facts", {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5", "history": True},
       {"facts": {"$unordered": [{"value": "95.0", "valid_to": I_(f2["valid_from"])}, {"value": "97.0", "valid_to": None}]}},
       setup=dict(S, facts=[f1, f2]))
    fx("fact-current-only-one", "relay", "facts-supersession", "L2", "After supersession exactly one current fact exists", F, "get_facts",
       {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5"},
       {"facts": [{"value": "97.0", "valid_to": None}]}, setup=dict(S, facts=[f1, f2]))
    fx("fact-supersede-returns-new", "relay", "facts-supersession", "L2", "assert_fact over an existing fact returns the new current fact", F,
       "assert_fact", f2, {"value": "97.0", "valid_to": None, "valid_from": I_(f2["valid_from"])}, setup=SF)
    fx("fact-other-predicate-untouched", "relay", "facts-supersession", "L2", "Supersession only touches the same (subject, predicate)", F,
       "get_facts", {"project_id": "proj_conf", "subject": "longmemeval_s"},
       {"facts": {"$unordered": [{"predicate": "recall_any_at_5", "value": "97.0"}, {"predicate": "status", "value": "done"}]}},
       setup=dict(S, facts=[fact("longmemeval_s", "status", "done", "2026-04-02T00:00:00Z"), f1, f2]))
    fx("fact-invalidate-count", "relay", "facts-supersession", "L2", "invalidate_fact returns the count invalidated", ["Relay §7.4", "Relay §8.7"],
       "invalidate_fact", {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5"}, {"invalidated": 1}, setup=SF)
    fx("fact-invalidate-none", "relay", "facts-supersession", "L2", "invalidate_fact with nothing current returns 0", ["Relay §7.4", "Relay §8.7"],
       "invalidate_fact", {"project_id": "proj_conf", "subject": "nothing", "predicate": "here"}, {"invalidated": 0}, setup=S)
    fx("fact-invalidate-leaves-no-current", "relay", "facts-supersession", "L2", "After invalidation the current query returns no row",
       ["Relay §7.4"], "get_facts", {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5"}, {"facts": []},
       setup=dict(SF, steps=[{"operation": "invalidate_fact", "args": {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5"}}]))
    fx("fact-value-must-be-string", "relay", "facts-supersession", "L2", "A numeric value is refused: values are strings", ["Relay §7.1"],
       "assert_fact", dict(f1, value=97.0), {"error": "invalid_schema", "status": 400}, setup=S)
    fx("fact-confidence-out-of-range", "relay", "facts-supersession", "L2", "confidence outside 0..1 is refused", ["Relay §7.2"],
       "assert_fact", dict(f1, confidence=1.5), {"error": "invalid_schema", "status": 400}, setup=S)
    fx("fact-missing-subject", "relay", "facts-supersession", "L2", "A fact without subject is refused", ["Relay §7.1", "Relay §8.6"],
       "assert_fact", {k: v for k, v in f1.items() if k != "subject"}, {"error": "invalid_schema", "status": 400}, setup=S)
    A = ["Relay §7.3", "errata: facts point-in-time"]
    f3 = fact("longmemeval_s", "recall_any_at_5", "99.0", "2026-04-15T12:00:00Z")
    SA = dict(S, facts=[f1, f2, f3])
    for name, t, val in [("before-first", "2026-03-01T00:00:00Z", None), ("at-first-start", "2026-04-01T12:00:00Z", "95.0"),
                         ("inside-first", "2026-04-05T00:00:00Z", "95.0"), ("at-boundary-exclusive", "2026-04-10T12:00:00Z", "97.0"),
                         ("just-before-boundary", "2026-04-10T11:59:59Z", "95.0"), ("inside-second", "2026-04-12T00:00:00Z", "97.0"),
                         ("current-open-ended", "2026-12-31T00:00:00Z", "99.0")]:
        fx("facts-as-of-" + name, "relay", "facts-as-of", "L2", "Point-in-time query valid_from <= t < valid_to: " + name.replace('-', ' '), A,
           "get_facts", {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5", "as_of": t},
           {"facts": [] if val is None else [{"value": val}]}, setup=SA)
    fx("facts-as-of-after-invalidation", "relay", "facts-as-of", "L2", "An invalidated fact is still visible as of a time before invalidation", A + ["Relay §7.4"],
       "get_facts", {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5", "as_of": "2026-04-05T00:00:00Z"},
       {"facts": [{"value": "95.0"}]},
       setup=dict(SF, steps=[{"operation": "invalidate_fact", "args": {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5"}}]))
    fx("facts-history-all", "relay", "facts-as-of", "L2", "history returns every version in valid-time order", A, "get_facts",
       {"project_id": "proj_conf", "subject": "longmemeval_s", "predicate": "recall_any_at_5", "history": True},
       {"facts": [{"value": "95.0", "valid_to": I_(f2["valid_from"])}, {"value": "97.0", "valid_to": I_(f3["valid_from"])}, {"value": "99.0", "valid_to": None}]}, setup=SA)
    fx("facts-as-of-bad-time", "relay", "facts-as-of", "L2", "An unparsable as_of is refused", A, "get_facts",
       {"project_id": "proj_conf", "subject": "longmemeval_s", "as_of": "last tuesday"}, {"error": {"$any": "string"}, "status": 400}, setup=SA)

    # review
    RV = ["Relay §5.3", "Relay §8.5", "errata: review"]
    draft = p_(40, status="draft")
    fx("review-flag-draft", "relay", "review", "L3", "flag_for_review moves a draft to awaiting_review with the review type", RV,
       "flag_for_review", {"package_id": draft["package_id"], "review_type": "human", "note": "please check"},
       {"status": "awaiting_review", "review_type": "human", "content_hash": {"$prefix": "sha256:"}}, setup=dict(S, packages=[draft]))
    flagged = dict(draft, status="awaiting_review", review_type="human")
    fx("review-flag-rehashes", "relay", "review", "L3", "The flagged package is re-hashed over its new status", RV + ["errata: Relay content hash"],
       "flag_for_review", {"package_id": draft["package_id"], "review_type": "human"},
       {"content_hash": R.content_hash(flagged)}, setup=dict(S, packages=[draft]))
    fx("review-flag-complete-refused", "relay", "review", "L3", "A complete package cannot be flagged: invalid_transition", RV,
       "flag_for_review", {"package_id": ok["package_id"], "review_type": "agent"}, {"error": "invalid_transition", "status": 400},
       setup=dict(S, packages=[ok]))
    fx("review-flag-unknown", "relay", "review", "L3", "Flagging an unknown package: 404 package_not_found", RV,
       "flag_for_review", {"package_id": "pkg_nope", "review_type": "agent"}, {"error": "package_not_found", "status": 404}, setup=S)
    fx("review-flag-bad-review-type", "relay", "review", "L3", "review_type must be human or agent", RV,
       "flag_for_review", {"package_id": draft["package_id"], "review_type": "none"}, {"error": {"$any": "string"}, "status": 400},
       setup=dict(S, packages=[draft]))
    flag_step = [{"operation": "flag_for_review", "args": {"package_id": draft["package_id"], "review_type": "human"}}]
    fx("review-complete", "relay", "review", "L3", "awaiting_review -> complete", RV + ["Relay §11.4"], "review",
       {"package_id": draft["package_id"], "outcome": "complete", "note": "ok"}, {"status": "complete", "content_hash": R.content_hash(dict(flagged, status="complete"))},
       setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-revision-requested", "relay", "review", "L3", "awaiting_review -> revision_requested", RV + ["Relay §11.4"], "review",
       {"package_id": draft["package_id"], "outcome": "revision_requested"}, {"status": "revision_requested"},
       setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-not-awaiting", "relay", "review", "L3", "draft -> revision_requested is not a lifecycle transition: invalid_transition", RV, "review",
       {"package_id": draft["package_id"], "outcome": "revision_requested"}, {"error": "invalid_transition", "status": 400}, setup=dict(S, packages=[draft]))
    fx("review-complete-is-terminal", "relay", "review", "L3", "No transition from complete", RV, "review",
       {"package_id": ok["package_id"], "outcome": "revision_requested"}, {"error": "invalid_transition", "status": 400}, setup=dict(S, packages=[ok]))
    fx("review-bad-outcome", "relay", "review", "L3", "An unknown review outcome is refused", RV, "review",
       {"package_id": draft["package_id"], "outcome": "maybe"}, {"error": {"$any": "string"}, "status": 400}, setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-list-awaiting", "relay", "review", "L3", "List the packages awaiting review in a project", RV + ["Relay §11.4"], "pull",
       {"mode": "awaiting_review", "project_id": "proj_conf"}, {"packages": [{"package_id": draft["package_id"], "status": "awaiting_review"}]},
       setup=dict(S, packages=[draft, ok], steps=flag_step))
    # Review gates (specs/relay.md "Review gates"): a human review is closed only by a human who
    # is not the package's author. `as` sends the review as that fixture actor (--actor-token).
    G = RV + ["specs/relay.md: Review gates", "Relay P5"]
    fx("review-human-by-author-refused", "relay", "review", "L3", "The author cannot complete their own human review: 403 review_not_allowed", G, "review",
       {"package_id": draft["package_id"], "outcome": "complete", "as": "jordan"}, {"error": "review_not_allowed", "status": 403},
       setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-human-by-author-changes-nothing", "relay", "review", "L3", "After the author's refused review the package is still awaiting_review", G, "pull",
       {"mode": "specific", "package_id": draft["package_id"]}, {"status": "awaiting_review", "review_type": "human", "content_hash": R.content_hash(flagged)},
       setup=dict(S, packages=[draft], steps=flag_step + [{"operation": "review", "args": {"package_id": draft["package_id"], "outcome": "complete", "as": "jordan"}}]))
    fx("review-human-by-agent-refused", "relay", "review", "L3", "An agent cannot close a human review: 403 review_not_allowed", G, "review",
       {"package_id": draft["package_id"], "outcome": "revision_requested", "as": "agent-conf"}, {"error": "review_not_allowed", "status": 403},
       setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-human-by-another-human", "relay", "review", "L3", "A human other than the author completes the human review", G, "review",
       {"package_id": draft["package_id"], "outcome": "complete", "as": "riley"}, {"status": "complete", "review_type": "human", "content_hash": R.content_hash(dict(flagged, status="complete"))},
       setup=dict(S, packages=[draft], steps=flag_step))
    fx("review-complete-frozen", "relay", "review", "L3", "A completed package never changes: re-deposit with other content is refused", RV + ["Relay §6.6", "Relay §10.1"],
       "deposit", {"package": dict(ok, title="edited")}, {"error": "duplicate_package_id", "status": 409}, setup=dict(S, packages=[ok]))

    # export / import
    E = ["Relay §10.1", "Relay §10.3", "errata: export"]
    fx("export-roundtrip-hashes", "relay", "export-roundtrip", "L1", "Export then import into a fresh store preserves every content hash", E,
       "export_import", {"project_id": "proj_conf"},
       {"hashes_preserved": True, "packages": {"$unordered": [{"package_id": x["package_id"], "content_hash": R.content_hash(x)} for x in pk[:3]]}},
       setup=dict(S, packages=pk[:3]))
    fx("export-roundtrip-facts", "relay", "export-roundtrip", "L2", "Facts survive export and import with their valid times", E,
       "export_import", {"project_id": "proj_conf"}, {"hashes_preserved": True, "facts": 2, "reexport_identical": True}, setup=dict(S, facts=[f1, f2]))
    fx("export-deterministic", "relay", "export-roundtrip", "L1", "Two exports of the same data are byte-identical", E,
       "export_import", {"project_id": "proj_conf"}, {"reexport_identical": True}, setup=dict(S, packages=pk))
    fx("export-unknown-fields-kept", "relay", "export-roundtrip", "L1", "Unknown and x-* fields survive export and import", E + ["Relay §12.1"],
       "export_import", {"project_id": "proj_conf"}, {"hashes_preserved": True, "packages": [{"package_id": withx["package_id"], "content_hash": R.content_hash(withx)}]},
       setup=dict(S, packages=[withx]))
    fx("export-empty-project", "relay", "export-roundtrip", "L1", "An empty project exports and imports to nothing", E,
       "export_import", {"project_id": "proj_conf"}, {"packages": [], "facts": 0, "hashes_preserved": True}, setup=S)
    fx("export-tampered-import-refused", "relay", "export-roundtrip", "L1", "An import whose package does not match its content hash is refused", E + ["Relay §6.6"],
       "export_import", {"project_id": "proj_conf", "tamper": True}, {"error": {"$any": "string"}}, setup=dict(S, packages=pk[:1]))

    # relay http errors
    HE = ["errata: Relay error bodies"]
    fx("relay-http-unknown-package", "relay", "http-errors", "L0", "GET of an unknown package: 404 with the error body", HE + ["Relay §9.1"], "http",
       {"method": "GET", "path": "/v1/packages/pkg_nope"}, {"status": 404, "body": {"error": "package_not_found", "message": {"$any": "string"}}}, setup=S)
    fx("relay-http-deposit-not-json", "relay", "http-errors", "L1", "A deposit body that is not JSON: 400", HE, "http",
       {"method": "POST", "path": "/v1/projects/proj_conf/packages", "body": "not json"}, {"status": 400, "body": {"error": {"$any": "string"}}}, setup=S)
    fx("relay-http-deposit-invalid", "relay", "http-errors", "L1", "An invalid package over HTTP: 400 invalid_schema with a pointer", HE, "http",
       {"method": "POST", "path": "/v1/projects/proj_conf/packages", "body": {k: v for k, v in ok.items() if k != "title"}},
       {"status": 400, "body": {"error": "invalid_schema", "details": {"errors": {"$contains": [{"pointer": "/title"}]}}}}, setup=S)
    fx("relay-http-conformance-descriptor", "relay", "http-errors", "L0", "The conformance descriptor is published", ["Relay §11.5", "Relay §15.1"], "http",
       {"method": "GET", "path": "/v1/conformance"},
       {"status": 200, "body": {"protocol_version": "0.1", "conformance_level": {"$any": "string"}, "capabilities": {"$any": "object"},
                                "implementation": {"name": {"$any": "string"}, "version": {"$any": "string"}}}})
    fx("relay-http-flag-complete", "relay", "http-errors", "L3", "Flagging a complete package over HTTP: 400 invalid_transition", HE + ["Relay §5.3"], "http",
       {"method": "POST", "path": "/v1/packages/%s/flag" % ok["package_id"], "body": {"review_type": "human"}},
       {"status": 400, "body": {"error": "invalid_transition"}}, setup=dict(S, packages=[ok]))


if __name__ == '__main__':
    clean()
    gen_trace()
    gen_relay_wire()
    gen_relay_ops()
    gen_relay_package_ids()
    import gen_cra  # noqa: E402
    gen_cra.generate(fx, R, DATA)
    total = sum(COUNT.values())
    for k in sorted(COUNT):
        print("%-20s %d" % (k, COUNT[k]))
    print("total", total)
    readme = os.path.join(ROOT, '..', 'README.md')
    text = open(readme, encoding='utf-8').read()
    head, rest = text.split('<!-- counts:begin -->', 1)
    _, tail = rest.split('<!-- counts:end -->', 1)
    table = ['**%d fixtures**:' % total, '', '| surface | fixtures |', '|---|---|']
    table += ['| `%s` | %d |' % (k, COUNT[k]) for k in sorted(COUNT)]
    with open(readme, 'w', encoding='utf-8') as fh:
        fh.write(head + '<!-- counts:begin -->\n' + '\n'.join(table) + '\n<!-- counts:end -->' + tail)
