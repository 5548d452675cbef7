#!/usr/bin/env python3
"""Our own small implementation of the TRACE/1.0 Appendix B algorithm (standard library only).

The algorithm is the spec's (Appendix B: canonical JSON is Python's
``json.dumps(x, sort_keys=True, separators=(',', ':'))`` with the default ``ensure_ascii``; the
event hash is SHA-256 over the concatenated fields); this code is ours. It serves as the
reference the Rust implementation is tested and benchmarked against.

Usage:
  appendix_b.py verify FILE|- [--all] [--json] [--no-dup-check]
      Verify a .trace.jsonl chain with the same rules and error codes as `cra trace verify`
      (sequence_gap, chain_broken, invalid_genesis, hash_mismatch, malformed_event).
      Exit 0 valid, 2 invalid, 1 could not read. --no-dup-check uses plain json.loads (Python's
      last-key-wins), i.e. exactly the Appendix B loop, for benchmarking.
  appendix_b.py canonical
      Read JSON texts, one per line, on stdin; print each one's canonical form.
  appendix_b.py hash
      Read events, one per line, on stdin; print each one's event_hash.
"""

import hashlib
import json
import sys

# cra records integers of any length exactly (a 5,000-digit parameter is valid JSON). Python 3.11
# and later refuse to read or print an integer of over 4,300 digits unless the limit is lifted;
# this tool must read every chain cra accepts.
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)

GENESIS = "0" * 64
STRING_FIELDS = (
    "trace_version",
    "event_id",
    "trace_id",
    "span_id",
    "session_id",
    "timestamp",
    "event_type",
    "event_hash",
    "previous_event_hash",
)


def canonical_json(obj):
    """Appendix B canonical JSON."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def compute_event_hash(event):
    """Appendix B event hash (lowercase hex SHA-256)."""
    data = (
        event["trace_version"]
        + event["event_id"]
        + event["trace_id"]
        + event["span_id"]
        + (event.get("parent_span_id") or "")
        + event["session_id"]
        + str(event["sequence"])
        + event["timestamp"]
        + event["event_type"]
        + canonical_json(event["payload"])
        + event["previous_event_hash"]
    )
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class Malformed(Exception):
    pass


def _refuse_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise Malformed("duplicate key %r in an object" % key)
        obj[key] = value
    return obj


def _refuse_constant(name):
    raise Malformed("%s is not JSON (RFC 8259 has no such number)" % name)


def parse_event(line, dup_check=True):
    """Parse one line into an event dict or raise Malformed.

    With dup_check (the default) the line is read as strictly as cra does: duplicate keys and
    the non-JSON constants NaN/Infinity are refused. Without it, plain json.loads."""
    try:
        if dup_check:
            event = json.loads(line, object_pairs_hook=_refuse_duplicates,
                               parse_constant=_refuse_constant)
        else:
            event = json.loads(line)
    except Malformed:
        raise
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise Malformed("not valid JSON: %s" % e)
    if not isinstance(event, dict):
        raise Malformed("the line is not a JSON object")
    for field in STRING_FIELDS:
        if field not in event:
            raise Malformed("missing field `%s`" % field)
        if not isinstance(event[field], str):
            raise Malformed("field `%s` must be a string" % field)
    psi = event.get("parent_span_id")
    if psi is not None and not isinstance(psi, str):
        raise Malformed("field `parent_span_id` must be a string or null")
    seq = event.get("sequence")
    if "sequence" not in event:
        raise Malformed("missing field `sequence`")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0 or seq >= 2**64:
        raise Malformed("field `sequence` must be a non-negative integer")
    if "payload" not in event:
        raise Malformed("missing field `payload`")
    if not isinstance(event["payload"], dict):
        raise Malformed("field `payload` must be an object")
    return event


def verify(stream, all_errors=False, dup_check=True):
    """Verify a chain read line by line. Returns (events, [(sequence, line, code, message)])."""
    findings = []
    prev = None  # (sequence, event_hash) of the last well-formed event
    expected = 0  # the sequence the next event should have
    events = 0
    for line_no, raw in enumerate(stream, start=1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        events += 1
        here = []
        try:
            event = parse_event(raw, dup_check)
        except Malformed as e:
            here.append((expected, line_no, "malformed_event", str(e)))
            prev = None
            expected += 1
        else:
            seq = event["sequence"]
            if seq != expected:
                here.append((expected, line_no, "sequence_gap",
                             "sequence is %d, expected %d" % (seq, expected)))
            if expected == 0 and events == 1:
                if event["previous_event_hash"] != GENESIS:
                    here.append((expected, line_no, "invalid_genesis",
                                 "the first event's previous_event_hash must be 64 zeros"))
            elif prev is not None and event["previous_event_hash"] != prev[1]:
                here.append((expected, line_no, "chain_broken",
                             "previous_event_hash does not match the previous event's event_hash"))
            computed = compute_event_hash(event)
            if computed != event["event_hash"]:
                here.append((expected, line_no, "hash_mismatch",
                             "event_hash is %s, computed %s" % (event["event_hash"], computed)))
            prev = (seq, event["event_hash"])
            expected = seq + 1
        if here:
            if not all_errors:
                findings.append(here[0])
                break
            findings.extend(here)
    return events, findings


def _main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 1
    cmd = argv[1]
    if cmd == "canonical":
        out = sys.stdout
        for line in sys.stdin.buffer:
            out.write(canonical_json(json.loads(line)) + "\n")
        return 0
    if cmd == "hash":
        for line in sys.stdin.buffer:
            print(compute_event_hash(json.loads(line)))
        return 0
    if cmd == "verify":
        args = argv[2:]
        all_errors = "--all" in args
        as_json = "--json" in args
        dup_check = "--no-dup-check" not in args
        files = [a for a in args if not a.startswith("--")]
        path = files[0] if files else "-"
        try:
            stream = sys.stdin.buffer if path == "-" else open(path, "rb")
        except OSError as e:
            sys.stderr.write("appendix_b.py: cannot read %s: %s\n" % (path, e))
            return 1
        with stream:
            events, findings = verify(stream, all_errors, dup_check)
        if as_json:
            first = findings[0] if findings else None
            doc = {
                "valid": not findings,
                "events": events,
                "first_error": None if first is None else dict(
                    zip(("sequence", "line", "code", "message"), first)),
            }
            if all_errors:
                doc["errors"] = [dict(zip(("sequence", "line", "code", "message"), f))
                                 for f in findings]
            print(json.dumps(doc))
        elif findings:
            for seq, line, code, message in findings:
                print("invalid: %s at sequence %d (line %d): %s" % (code, seq, line, message))
        else:
            print("valid: %d events" % events)
        return 2 if findings else 0
    sys.stderr.write(__doc__)
    return 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
