"""Reference computations the conformance fixtures' expected values come from.

Written from the specs alone, never from the Rust implementation:
* TRACE: Appendix B of the CRA spec, verbatim semantics (json.dumps sort_keys, compact
  separators, default ensure_ascii=True), SHA-256 lowercase hex.
* Relay: Appendix A canonical JSON as fixed by the Relay errata (UTF-8 byte key order, null
  members dropped at every depth, RFC 8785 numbers, minimal string escaping), hash rendered
  'sha256:' + hex, top-level 'content_hash' removed before hashing.
"""
import hashlib
import json
import math

GENESIS = "0" * 64


def trace_canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(',', ':'))


def trace_preimage(event):
    return (
        event['trace_version'] + event['event_id'] + event['trace_id'] + event['span_id']
        + (event.get('parent_span_id') or '') + event['session_id'] + str(event['sequence'])
        + event['timestamp'] + event['event_type'] + trace_canonical(event['payload'])
        + event['previous_event_hash']
    )


def event_hash(event):
    return hashlib.sha256(trace_preimage(event).encode('utf-8')).hexdigest()


def es_number(x):
    """ECMAScript Number::toString (RFC 8785 §3.2.2.3)."""
    if isinstance(x, bool):
        raise TypeError("bool is not a number")
    if isinstance(x, int):
        if abs(x) < 2 ** 53:
            return str(x)
        x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN/Infinity are not JSON")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))  # shortest round-trip digits
    if 'e' in r:
        mant, exp = r.split('e')
        exp = int(exp)
    else:
        mant, exp = r, 0
    if '.' in mant:
        ip, fp = mant.split('.')
    else:
        ip, fp = mant, ''
    digits = (ip + fp).lstrip('0')
    # position of decimal point relative to the start of `digits`
    lead_zeros = len(ip + fp) - len((ip + fp).lstrip('0'))
    n = len(ip) - lead_zeros + exp
    digits = digits.rstrip('0') or '0'
    k = len(digits)
    if k <= n <= 21:
        s = digits + '0' * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + '.' + digits[n:]
    elif -6 < n <= 0:
        s = '0.' + '0' * (-n) + digits
    else:
        e = n - 1
        es = ('+' if e >= 0 else '-') + str(abs(e))
        s = digits[0] + ('.' + digits[1:] if k > 1 else '') + 'e' + es
    return sign + s


def _relay_str(s):
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == '\\':
            out.append('\\\\')
        elif ch == '\b':
            out.append('\\b')
        elif ch == '\f':
            out.append('\\f')
        elif ch == '\n':
            out.append('\\n')
        elif ch == '\r':
            out.append('\\r')
        elif ch == '\t':
            out.append('\\t')
        elif c < 0x20:
            out.append('\\u%04x' % c)
        else:
            out.append(ch)
    out.append('"')
    return ''.join(out)


def relay_canonical(v):
    if v is None:
        return 'null'
    if v is True:
        return 'true'
    if v is False:
        return 'false'
    if isinstance(v, (int, float)):
        return es_number(v)
    if isinstance(v, str):
        return _relay_str(v)
    if isinstance(v, list):
        return '[' + ','.join(relay_canonical(x) for x in v) + ']'
    if isinstance(v, dict):
        items = sorted(((k, x) for k, x in v.items() if x is not None), key=lambda kv: kv[0].encode('utf-8'))
        return '{' + ','.join(_relay_str(k) + ':' + relay_canonical(x) for k, x in items) + '}'
    raise TypeError(type(v))


def content_hash(package):
    p = {k: x for k, x in package.items() if k != 'content_hash'}
    return 'sha256:' + hashlib.sha256(relay_canonical(p).encode('utf-8')).hexdigest()
