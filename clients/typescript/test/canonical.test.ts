/**
 * The TRACE canonical profile against Python, byte for byte: `tools/gen_canonical_cases.py`
 * (the cases the Rust writer is held to) prints each input with what
 * `json.dumps(json.loads(x), sort_keys=True, separators=(",", ":"))` makes of it.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";

import { canonical, canonicalExact, parseExact, pythonFloat } from "@cra/client";
import { REPO_ROOT } from "./server.js";

const SEED = "20261122";

test("canonical JSON matches Python's byte for byte on every generated case", () => {
  const generator = join(REPO_ROOT, "tools", "gen_canonical_cases.py");
  const run = spawnSync("python3", [generator, "--seed", SEED, "--per-category", "1200"], {
    encoding: "utf8",
    maxBuffer: 1 << 30,
  });
  assert.equal(run.status, 0, `gen_canonical_cases.py failed: ${run.stderr}`);
  const failures: string[] = [];
  let cases = 0;
  for (const line of run.stdout.split("\n")) {
    if (line === "") continue;
    const { category, input, expected } = JSON.parse(line) as Record<string, string>;
    cases++;
    let actual: string;
    try {
      actual = canonicalExact(parseExact(input as string));
    } catch (error) {
      actual = `<refused: ${String(error)}>`;
    }
    if (actual !== expected && failures.length < 5) {
      failures.push(`${category}: ${input}\n  expected ${expected}\n  actual   ${actual}`);
    }
  }
  assert.ok(cases > 10_000, `only ${cases} cases`);
  assert.deepEqual(failures, []);
});

test("a float prints as Python's repr, ties to even", () => {
  const cases: Array<[number, string]> = [
    [1, "1.0"], [100000, "100000.0"], [0.0001, "0.0001"], [0.00001, "1e-05"], [1e16, "1e+16"],
    [1.5e300, "1.5e+300"], [5e-324, "5e-324"], [-0, "-0.0"], [925957820813.90625, "925957820813.9062"],
    [123456789012345.6, "123456789012345.6"], [1 / 3, "0.3333333333333333"],
  ];
  for (const [value, expected] of cases) assert.equal(pythonFloat(value), expected, String(value));
});

test("values built in JavaScript: integral numbers are integers, keys by code point", () => {
  assert.equal(canonical({ b: 1, a: [0.5, -0, 2n ** 70n, "é\u007f😀"], "\uffff": null, "😀": true }),
    '{"a":[0.5,0,1180591620717411303424,"\\u00e9\\u007f\\ud83d\\ude00"],"b":1,"\\uffff":null,"\\ud83d\\ude00":true}');
  assert.throws(() => canonical({ x: Number.NaN }), TypeError);
});

test("the reader refuses what cra refuses", () => {
  for (const bad of ['{"a":1,"a":2}', '"\\ud800"', '"\\udc00x"', "NaN", "[1,]", "01", `${"[".repeat(129)}${"]".repeat(129)}`]) {
    assert.throws(() => parseExact(bad), /at character/, bad);
  }
  assert.doesNotThrow(() => parseExact(`${"[".repeat(128)}${"]".repeat(128)}`));
});
