#!/usr/bin/env python3
"""Seeded generator of differential test cases for the TRACE canonical-JSON profile.

Each output line is a JSON object {"category", "input", "expected"}: `input` is a JSON text
written in deliberately varied spellings (random whitespace, raw or escaped characters in either
hex case, numbers as 1E5 / 1.50 / -0 / 1e400 ...), and `expected` is what the Appendix B code
makes of it: json.dumps(json.loads(input), sort_keys=True, separators=(',', ':')) with the
default ensure_ascii. The Rust test in crates/cra-wire/tests/wire/trace_canonical.rs runs this
script and requires byte equality for every case.

Inputs stay inside what cra accepts on purpose: no duplicate keys, no lone surrogates, nesting
below cra's limit of 128, integers well under Python's 4300-digit limit.

Usage: gen_canonical_cases.py [--seed N] [--per-category N]   (writes JSON lines to stdout)
"""

import json
import random
import sys

CONTROL_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def canonical_json(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class Gen:
    def __init__(self, rng):
        self.r = rng

    # -- whitespace and strings ------------------------------------------------------------
    def ws(self):
        if self.r.random() < 0.7:
            return ""
        return "".join(self.r.choice(" \t\n\r") for _ in range(self.r.randint(1, 3)))

    def hex4(self, cp):
        h = "%04x" % cp
        return "\\u" + (h.upper() if self.r.random() < 0.3 else h)

    def enc_char(self, ch, escape_prob=0.3):
        cp = ord(ch)
        if ch == '"':
            return '\\"' if self.r.random() < 0.8 else self.hex4(cp)
        if ch == "\\":
            return "\\\\" if self.r.random() < 0.8 else self.hex4(cp)
        if ch == "/" and self.r.random() < 0.3:
            return "\\/"
        if cp < 0x20:
            if ch in CONTROL_SHORT and self.r.random() < 0.6:
                return CONTROL_SHORT[ch]
            return self.hex4(cp)
        if self.r.random() < escape_prob:
            if cp >= 0x10000:
                v = cp - 0x10000
                return self.hex4(0xD800 + (v >> 10)) + self.hex4(0xDC00 + (v & 0x3FF))
            return self.hex4(cp)
        return ch

    def enc_string(self, s, escape_prob=0.3):
        return '"' + "".join(self.enc_char(c, escape_prob) for c in s) + '"'

    def bmp_char(self):
        while True:
            cp = self.r.choice([
                self.r.randint(0x20, 0x7E),
                self.r.randint(0xA0, 0x7FF),
                self.r.randint(0x800, 0xFFFF),
                self.r.choice([0x7F, 0x80, 0x9F, 0xA0, 0xFEFF, 0xFFFD, 0xFFFE, 0xFFFF, 0x2028,
                               0x2029, 0xE000, 0xD7FF]),
            ])
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)

    def astral_char(self):
        return chr(self.r.choice([
            self.r.randint(0x10000, 0x10FFFF),
            self.r.choice([0x10000, 0x1F600, 0x1F680, 0x1F9FF, 0x20000, 0xE0001, 0x10FFFF]),
        ]))

    def text(self, kind="mixed", n=None):
        n = self.r.randint(0, 12) if n is None else n
        out = []
        for _ in range(n):
            k = kind if kind != "mixed" else self.r.choice(["ascii", "bmp", "astral", "control"])
            if k == "ascii":
                out.append(chr(self.r.randint(0x20, 0x7E)))
            elif k == "bmp":
                out.append(self.bmp_char())
            elif k == "astral":
                out.append(self.astral_char() if self.r.random() < 0.6 else self.bmp_char())
            else:
                out.append(chr(self.r.choice(list(range(0x20)) + [0x7F])))
        return "".join(out)

    # -- numbers --------------------------------------------------------------------------
    def digits(self, n, lead_nonzero=True):
        d = "".join(self.r.choice("0123456789") for _ in range(n))
        if lead_nonzero and n > 0:
            d = self.r.choice("123456789") + d[1:]
        return d

    def int_text(self, big=False):
        if big:
            n = self.r.choice([20, 21, 25, 30, 39, 40, 60, 100, 300])
        else:
            n = self.r.randint(1, 19)
        body = self.digits(n) if n > 1 or self.r.random() < 0.8 else "0"
        if n == 1 and self.r.random() < 0.2:
            body = "0"
        sign = "-" if self.r.random() < 0.4 else ""
        return sign + body

    def float_text(self):
        r = self.r
        style = r.randint(0, 5)
        sign = "-" if r.random() < 0.4 else ""
        if style == 0:  # special values across the repr boundaries
            return sign + r.choice([
                "1e-7", "1e-07", "1E-7", "1e16", "1e+16", "1E16", "1e15", "1e300", "1.5e300",
                "1e400", "1e-400", "0.0", "0.0001", "0.00001", "1e-4", "1e-5", "9.999999999999999e15",
                "1e22", "1e23", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308",
                "1.7976931348623159e308", "0.1", "0.30000000000000004", "100.0", "1.50",
                "123456789012345678.0", "0e0", "0E+0", "0.000", "4.35", "2.5", "1e0", "12e-1",
            ])
        if style == 1:  # positional with a fraction
            return sign + self.int_text().lstrip("-") + "." + self.digits(r.randint(1, 20), False)
        if style == 2:  # mantissa and exponent across the whole double range
            mant = self.digits(1) + ("." + self.digits(r.randint(1, 17), False) if r.random() < 0.7 else "")
            exp = r.randint(-330, 310)
            e = r.choice("eE")
            es = ("+" if exp >= 0 and r.random() < 0.5 else "") + str(exp)
            return sign + mant + e + es
        if style == 3:  # near the positional/scientific switch (exponents -6..18)
            mant = self.digits(1) + ("." + self.digits(r.randint(1, 16), False) if r.random() < 0.7 else "")
            return sign + mant + "e" + str(r.randint(-6, 18))
        if style == 4:  # a random double's own repr, re-spelled
            x = r.uniform(-1, 1) * 10 ** r.randint(-20, 20)
            return repr(x).replace("e+", r.choice(["e+", "e", "E+", "E"]))
        return sign + "0." + "0" * r.randint(0, 8) + self.digits(r.randint(1, 17))

    # -- structure ------------------------------------------------------------------------
    def key(self, kind="mixed"):
        return self.text(kind, self.r.randint(0, 6))

    def obj(self, depth, kind, size=None):
        size = self.r.randint(0, 6) if size is None else size
        keys = []
        seen = set()
        for _ in range(size):
            k = self.key(kind)
            if k not in seen:
                seen.add(k)
                keys.append(k)
        parts = [self.ws() + self.enc_string(k) + self.ws() + ":" + self.ws() + self.value(depth + 1, kind) + self.ws()
                 for k in keys]
        return "{" + ",".join(parts) + self.ws() + "}"

    def arr(self, depth, kind, size=None):
        size = self.r.randint(0, 6) if size is None else size
        return "[" + ",".join(self.ws() + self.value(depth + 1, kind) + self.ws() for _ in range(size)) + self.ws() + "]"

    def scalar(self, kind):
        r = self.r.random()
        if r < 0.35:
            return self.enc_string(self.text(kind))
        if r < 0.55:
            return self.float_text()
        if r < 0.75:
            return self.int_text(big=self.r.random() < 0.3)
        return self.r.choice(["true", "false", "null"])

    def value(self, depth, kind="mixed"):
        if depth >= 4:
            return self.scalar(kind)
        r = self.r.random()
        if r < 0.3:
            return self.obj(depth, kind)
        if r < 0.45:
            return self.arr(depth, kind)
        return self.scalar(kind)


def cases(seed, per_category):
    g = Gen(random.Random(seed))
    r = g.r
    yield from (("control_chars", g.enc_string(chr(c) + "x" + chr(c))) for c in list(range(0x20)) + [0x7F])
    yield from (("control_chars", "{%s:%d}" % (g.enc_string(chr(c)), c)) for c in list(range(0x20)) + [0x7F])
    builders = {
        "bmp_unicode": lambda: g.obj(0, "bmp", r.randint(1, 5)) if r.random() < 0.5 else g.enc_string(g.text("bmp"), 0.5),
        "astral_unicode": lambda: g.obj(0, "astral", r.randint(1, 5)) if r.random() < 0.5 else g.enc_string(g.text("astral"), 0.5),
        "control_chars": lambda: g.enc_string(g.text("control", r.randint(1, 10))) if r.random() < 0.5 else g.obj(0, "control", r.randint(1, 4)),
        "quotes_backslashes_in_keys": lambda: "{" + ",".join(
            g.enc_string(k) + ":" + g.scalar("ascii")
            for k in dict.fromkeys("".join(r.choice(['"', "\\", "/", "a", "'", "\\u", "\\n"]) for _ in range(r.randint(0, 5)))
                                   for _ in range(r.randint(1, 6)))) + "}",
        "floats": lambda: g.float_text() if r.random() < 0.5 else "[" + ",".join(g.float_text() for _ in range(r.randint(1, 8))) + "]",
        "big_integers": lambda: g.int_text(big=True) if r.random() < 0.5 else "[" + ",".join(g.int_text(big=r.random() < 0.6) for _ in range(r.randint(1, 8))) + "]",
        "deep_nesting": lambda: deep(g, r.randint(10, 120)),
        "empty_containers": lambda: r.choice(["{}", "[]", '""', "[[]]", "{\"\":{}}", "[{},[],\"\"]",
                                              "{\"a\":[],\"b\":{},\"\":[{}]}", " [ ] ", "{ }"]) if r.random() < 0.3 else g.value(1, "ascii"),
        "key_order": lambda: g.obj(0, r.choice(["ascii", "bmp", "astral", "mixed"]), r.randint(5, 20)),
        "mixed_documents": lambda: g.value(0, "mixed"),
    }
    for name, build in builders.items():
        for _ in range(per_category):
            yield name, g.ws() + build() + g.ws()


def deep(g, depth):
    open_, close = [], []
    for _ in range(depth):
        if g.r.random() < 0.5:
            k = g.key()
            open_.append("{" + g.enc_string(k) + ":")
            close.append("}")
        else:
            open_.append("[")
            close.append("]")
    return "".join(open_) + g.scalar("mixed") + "".join(reversed(close))


def main(argv):
    seed, per_category = 20261122, 1200
    args = list(argv[1:])
    while args:
        flag = args.pop(0)
        if flag == "--seed":
            seed = int(args.pop(0))
        elif flag == "--per-category":
            per_category = int(args.pop(0))
        else:
            sys.stderr.write(__doc__)
            return 1
    out = sys.stdout
    n = 0
    for category, text in cases(seed, per_category):
        expected = canonical_json(json.loads(text))
        out.write(json.dumps({"category": category, "input": text, "expected": expected}) + "\n")
        n += 1
    sys.stderr.write("gen_canonical_cases.py: seed %d, %d cases\n" % (seed, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
