// What the console's browser test and its benchmark share: a `cra serve` on loopback, the API
// as Node's fetch calls it, Debian's chromium through puppeteer-core, and signing in.

import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import puppeteer from "puppeteer-core";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The trace test atlas: `doc.read` allowed, `deploy.run` gated by an approval. */
export const ATLAS = join(ROOT, "crates/cra-cli/tests/fixtures/trace/atlas");
/** How long a page may take to show what the API already holds (a bound, not a pace). */
export const DEADLINE_MS = 10_000;

/**
 * `cra serve` on a free loopback port with `keys` (`{token, actor, type, roles}`) and an
 * optional configuration text; resolves to the process and its base URL.
 */
export function startServer(cra, work, keys, config) {
  const text = keys.map((k) => `[[keys]]\ntoken = "${k.token}"\nactor_id = "${k.actor}"\n`
    + `actor_type = "${k.type}"\nroles = ${JSON.stringify(k.roles)}\n`).join("\n");
  writeFileSync(join(work, "keys.toml"), text);
  const command = ["serve", "--addr", "127.0.0.1:0", "--data", join(work, "data"), "--atlas", ATLAS,
    "--api-keys", join(work, "keys.toml")];
  if (config) {
    writeFileSync(join(work, "cra.toml"), config);
    command.push("--config", join(work, "cra.toml"));
  }
  const server = spawn(resolve(cra), command, { stdio: ["ignore", "pipe", "inherit"] });
  // Every line is read for as long as the server runs, so a full pipe never stops it.
  const lines = createInterface({ input: server.stdout });
  return new Promise((done, fail) => {
    lines.on("line", (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) done({ server, base: m[1] });
    });
    server.on("exit", (code) => fail(new Error(`cra serve did not start (exit ${code})`)));
  });
}

/** The API as an agent or operator calls it (Node's fetch), answering `{status, body}`. */
export function client(base, key) {
  return async (method, path, body) => {
    const resp = await fetch(base + path, {
      method,
      headers: { Authorization: `Bearer ${key.token}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await resp.text();
    return { status: resp.status, body: text ? JSON.parse(text) : null };
  };
}

/** Debian's chromium, headless (root needs no sandbox in CI's container). */
export function launch(chromium) {
  return puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
}

/** Opens the console and signs in with `key`; answers the console page's response. */
export async function signIn(page, base, key) {
  const resp = await page.goto(`${base}/console/`);
  await page.waitForSelector("#sign-in:not([hidden])");
  await page.type("#key", key.token);
  await page.click("#sign-in button[type=submit]");
  await page.waitForSelector("#nav:not([hidden])", { timeout: DEADLINE_MS });
  return resp;
}

