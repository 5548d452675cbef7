/**
 * Exact JSON for hashing: a strict reader that keeps every number's text, and the TRACE
 * canonical form (`specs/canonical-json.md`, the spec's Appendix B), which is what
 * `json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))` prints in Python.
 *
 * `JSON.parse` cannot serve a verifier: it reads `1.0` and `1` as the same number, and rounds
 * integers past 2^53, but Appendix B hashes `1.0` and `1` differently and prints integers
 * exactly. So chains read by this client are also read here, and their payloads' canonical
 * texts are kept beside the parsed events (see `chain.ts`).
 */

/** A number as written in the JSON text. */
export class ExactNumber {
  constructor(readonly text: string) {}
  /** An integer has no fraction and no exponent (Python reads it as an `int`). */
  get isInteger(): boolean {
    return !/[.eE]/.test(this.text);
  }
}

/** An object's members in the order written. */
export class ExactObject {
  constructor(readonly members: Array<[string, Exact]>) {}
  get(name: string): Exact | undefined {
    return this.members.find(([key]) => key === name)?.[1];
  }
}

/** A JSON value as read by {@link parseExact}. */
export type Exact = null | boolean | string | ExactNumber | Exact[] | ExactObject;

/** Why a text is not JSON this client accepts, and where (a character offset). */
export class JsonSyntaxError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`${message} at character ${offset}`);
    this.name = "JsonSyntaxError";
  }
}

/** The deepest nesting accepted, as cra's own reader (`cra_wire::json::MAX_DEPTH`). */
export const MAX_DEPTH = 128;

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const SHORT_ESCAPES: Record<string, string> = {
  '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t",
};

/**
 * Reads one JSON text strictly, as cra reads untrusted input: RFC 8259 only, no duplicate keys,
 * no lone surrogate escapes, nesting at most {@link MAX_DEPTH}.
 */
export function parseExact(text: string): Exact {
  const reader = new Reader(text);
  reader.space();
  const value = reader.value(0);
  reader.space();
  if (reader.pos !== text.length) reader.fail("text after the JSON value");
  return value;
}

class Reader {
  pos = 0;
  constructor(readonly text: string) {}

  fail(message: string): never {
    throw new JsonSyntaxError(message, this.pos);
  }

  space(): void {
    while (" \t\n\r".includes(this.text[this.pos] ?? "x")) this.pos++;
  }

  literal(word: string): void {
    if (!this.text.startsWith(word, this.pos)) this.fail("not a JSON value");
    this.pos += word.length;
  }

  value(depth: number): Exact {
    const c = this.text[this.pos];
    if (c === "{" || c === "[") {
      if (depth >= MAX_DEPTH) this.fail(`nesting deeper than ${MAX_DEPTH}`);
      return c === "{" ? this.object(depth + 1) : this.array(depth + 1);
    }
    if (c === '"') return this.string();
    if (c === "t") return this.literal("true"), true;
    if (c === "f") return this.literal("false"), false;
    if (c === "n") return this.literal("null"), null;
    NUMBER.lastIndex = this.pos;
    const match = NUMBER.exec(this.text);
    if (!match) this.fail("not a JSON value");
    this.pos += match[0].length;
    return new ExactNumber(match[0]);
  }

  object(depth: number): ExactObject {
    this.pos++;
    const members: Array<[string, Exact]> = [];
    const seen = new Set<string>();
    this.space();
    if (this.text[this.pos] === "}") return this.pos++, new ExactObject(members);
    for (;;) {
      this.space();
      if (this.text[this.pos] !== '"') this.fail("an object key must be a string");
      const at = this.pos;
      const key = this.string();
      if (seen.has(key)) throw new JsonSyntaxError(`duplicate key ${JSON.stringify(key)}`, at);
      seen.add(key);
      this.space();
      if (this.text[this.pos] !== ":") this.fail("expected `:` after an object key");
      this.pos++;
      this.space();
      members.push([key, this.value(depth)]);
      this.space();
      const next = this.text[this.pos++];
      if (next === "}") return new ExactObject(members);
      if (next !== ",") this.fail("expected `,` or `}` in an object");
    }
  }

  array(depth: number): Exact[] {
    this.pos++;
    const items: Exact[] = [];
    this.space();
    if (this.text[this.pos] === "]") return this.pos++, items;
    for (;;) {
      this.space();
      items.push(this.value(depth));
      this.space();
      const next = this.text[this.pos++];
      if (next === "]") return items;
      if (next !== ",") this.fail("expected `,` or `]` in an array");
    }
  }

  string(): string {
    this.pos++;
    let out = "";
    for (;;) {
      const c = this.text[this.pos];
      if (c === undefined) this.fail("an unterminated string");
      if (c === '"') {
        this.pos++;
        return out;
      }
      if (c < " ") this.fail("a control character in a string");
      if (c !== "\\") {
        out += c;
        this.pos++;
        continue;
      }
      const e = this.text[this.pos + 1] ?? "";
      if (e !== "u") {
        const short = SHORT_ESCAPES[e];
        if (short === undefined) this.fail("an unknown escape");
        out += short;
        this.pos += 2;
        continue;
      }
      const unit = this.hex4(this.pos + 2);
      this.pos += 6;
      if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("a lone low surrogate escape");
      if (unit >= 0xd800 && unit <= 0xdbff) {
        const low = this.text.startsWith("\\u", this.pos) ? this.hex4(this.pos + 2) : -1;
        if (low < 0xdc00 || low > 0xdfff) this.fail("a lone high surrogate escape");
        this.pos += 6;
        out += String.fromCharCode(unit, low);
      } else {
        out += String.fromCharCode(unit);
      }
    }
  }

  hex4(at: number): number {
    const digits = this.text.slice(at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.fail("a \\u escape needs four hex digits");
    return parseInt(digits, 16);
  }
}

/** Compares two strings by Unicode code point (Python's order for `sort_keys`). */
export function byCodePoint(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // A surrogate starts an astral code point, which sorts after every BMP code point (also
    // after U+E000-U+FFFF, whose units are greater than a surrogate's).
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/** Appendix B's canonical text of a value read by {@link parseExact}. */
export function canonicalExact(value: Exact): string {
  if (value instanceof ExactNumber) return canonicalNumberText(value.text);
  if (value instanceof ExactObject) {
    const members = [...value.members].sort(([a], [b]) => byCodePoint(a, b));
    return `{${members.map(([k, v]) => `${quote(k)}:${canonicalExact(v)}`).join(",")}}`;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalExact).join(",")}]`;
  return canonicalScalar(value);
}

/**
 * Appendix B's canonical text of a value built in JavaScript: a `number` with an integral value
 * is written as an integer (a `bigint` too), any other as Python's `float.__repr__`. Numbers
 * that must keep a form JavaScript forgets (`1.0`, integers past 2^53) need the value read
 * from text: {@link parseExact} and {@link canonicalExact}.
 */
export function canonical(value: unknown): string {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`${value} is not a JSON number`);
    return Number.isInteger(value) ? BigInt(value).toString() : pythonFloat(value);
  }
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v)).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => byCodePoint(a, b));
    return `{${members.map(([k, v]) => `${quote(k)}:${canonical(v)}`).join(",")}}`;
  }
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return canonicalScalar(value);
  }
  throw new TypeError(`a ${typeof value} is not JSON`);
}

function canonicalScalar(value: null | boolean | string): string {
  return typeof value === "string" ? quote(value) : String(value);
}

/** A number's canonical text from its JSON spelling. */
function canonicalNumberText(text: string): string {
  if (!/[.eE]/.test(text)) return BigInt(text).toString();
  return pythonFloat(Number(text));
}

/**
 * Python's `float.__repr__`: the shortest digits that read back as the same double
 * (JavaScript's `toExponential()` finds the same ones), positional when the decimal exponent is
 * in [-4, 16), else `d.ddde+XX`; `inf` of an overflowing literal prints as `Infinity`.
 */
export function pythonFloat(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa = "", exponent = "0"] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const e = Number(exponent);
  if (e >= -4 && e < 16) {
    if (e < 0) return `${sign}0.${"0".repeat(-e - 1)}${digits}`;
    const whole = digits.slice(0, e + 1).padEnd(e + 1, "0");
    return `${sign}${whole}.${digits.slice(e + 1) || "0"}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

const ESCAPES: Record<string, string> = {
  '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
};

/** A string as Python's `json.dumps` writes it with `ensure_ascii`: printable ASCII kept,
 * everything else (DEL and non-ASCII included) as `\uXXXX` of each UTF-16 unit, lowercase. */
export function quote(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s[i] as string;
    const code = s.charCodeAt(i);
    const short = ESCAPES[c];
    if (short !== undefined) out += short;
    else if (code >= 0x20 && code < 0x7f) out += c;
    else out += "\\u" + code.toString(16).padStart(4, "0");
  }
  return out + '"';
}
