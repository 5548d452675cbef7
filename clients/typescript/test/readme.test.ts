/**
 * The repository README's TypeScript block ("An agent in TypeScript"), run as written: saved as
 * `agent.mjs` in a folder where the README's walk-through started its server (an atlas from
 * `cra atlas init`, data in `cra-data/`), with the package linked as `npm install
 * ./clients/typescript` links it; only the server's URL is replaced by the one it listens on.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";

import { REPO_ROOT, SKIP_LIVE } from "./server.js";

function block(heading: string): string {
  const text = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
  const rest = text.slice(text.indexOf(heading));
  const start = rest.indexOf("```js\n") + "```js\n".length;
  return rest.slice(start, rest.indexOf("```", start));
}

test("the README's TypeScript block executes an action and verifies its chain", { skip: SKIP_LIVE }, async () => {
  const cra = process.env["CRA_BIN"] as string;
  const code = block("## An agent in TypeScript");
  assert.ok(code.includes("http://127.0.0.1:8421"));
  const work = mkdtempSync(join(tmpdir(), "cra-ts-readme-"));
  const init = spawnSync(cra, ["atlas", "init", "my-atlas", "--id", "com.example.first"], { cwd: work, encoding: "utf8" });
  assert.equal(init.status, 0, init.stderr);
  mkdirSync(join(work, "node_modules", "@cra"), { recursive: true });
  symlinkSync(join(REPO_ROOT, "clients", "typescript"), join(work, "node_modules", "@cra", "client"), "dir");
  const server = spawn(cra, ["serve", "--atlas", "my-atlas", "--data", "cra-data", "--addr", "127.0.0.1:0"], { cwd: work });
  try {
    let url = "";
    for await (const line of createInterface({ input: server.stdout })) {
      if (line.includes("listening on ")) {
        url = line.split("listening on ")[1]?.trim() ?? "";
        break;
      }
    }
    server.stdout.resume();
    assert.ok(url, "cra serve did not say where it listens");
    writeFileSync(join(work, "agent.mjs"), code.replace("http://127.0.0.1:8421", url));
    const run = spawnSync(process.execPath, ["agent.mjs"], { cwd: work, encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(run.stdout.split(/\s+/).filter(Boolean), ["success", "undefined"]);
  } finally {
    server.kill();
    rmSync(work, { recursive: true, force: true });
  }
});
