// The operator console in a real browser: Debian's chromium driven by puppeteer-core (pinned in
// package.json, installed by .ci/install) against a `cra serve` this script starts on loopback
// with the trace test atlas (`doc.read` allowed, `deploy.run` gated by an approval).
//
//   node tools/peers/console_browser.mjs --cra target/debug/cra [--out DIR] [--chromium PATH]
//
// What it checks, each a line `ok` or `FAIL`, then `N passed, N failed` (exit 1 on a failure):
// sign in with an operator key; the page's Content-Security-Policy forbids inline script; an
// event appended through the API appears in the live view (10 s deadline: latency is measured
// by `cargo xtask bench`, not here); a payload holding HTML and script is shown as text; an
// approval granted from the console lets the gated call run; a session page shows the chain the
// server verified; an agent's key is refused another agent's session by the API (403) and the
// page says so; no errors in the browser's console (but that expected 403). A screenshot of
// each page is saved in the output folder.

import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

import { DEADLINE_MS, client, launch, signIn, startServer } from "./console_common.mjs";

const KEYS = {
  operator: { token: "console-operator-key-000", actor: "oscar", type: "human", roles: ["operator"] },
  bot: { token: "console-agent-bot-key-00", actor: "bot", type: "agent", roles: ["agent"] },
  eve: { token: "console-agent-eve-key-00", actor: "eve", type: "agent", roles: ["agent"] },
};
const HOSTILE = `<img src=x onerror="window.__hostile=1"><script>window.__hostile=2</script>`;

const { values: args } = parseArgs({
  options: {
    cra: { type: "string" },
    out: { type: "string" },
    chromium: { type: "string", default: process.env.CHROMIUM || "/usr/bin/chromium" },
    help: { type: "boolean", short: "h" },
  },
});
if (args.help || !args.cra) {
  console.log("usage: node tools/peers/console_browser.mjs --cra BIN [--out DIR] [--chromium PATH]");
  process.exit(args.help ? 0 : 2);
}
const out = resolve(args.out || mkdtempSync(join(tmpdir(), "cra-console-")));
mkdirSync(out, { recursive: true });

let passed = 0;
let failed = 0;
function check(what, ok, detail = "") {
  if (ok) {
    passed += 1;
    console.log(`ok    ${what}`);
  } else {
    failed += 1;
    console.log(`FAIL  ${what}${detail ? `\n      ${detail}` : ""}`);
  }
}

/** A CARP request's envelope for `session` (ids and time filled in). */
function envelope(session, operation) {
  return {
    carp_version: "1.0", request_id: randomUUID(), timestamp: new Date().toISOString(),
    operation, requester: { session_id: session, agent_id: "bot" },
  };
}

/** Resolves then executes `action` with `parameters` in `session`; answers the execute. */
async function act(api, session, action, parameters) {
  const resolved = await api("POST", "/v1/resolve", { ...envelope(session, "resolve"), task: { goal: `run ${action}` } });
  const resolution = resolved.body.resolution?.resolution_id ?? resolved.body.resolution_id;
  const run = () => api("POST", "/v1/execute", { ...envelope(session, "execute"),
    execution: { resolution_id: resolution, action_id: action, parameters } });
  return { first: await run(), again: run };
}

/** A page in a context of its own (its own session storage) whose console errors go to `errors`. */
async function openPage(browser, name, errors) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`${name}: ${m.text()} (${m.location()?.url ?? ""})`);
  });
  page.on("pageerror", (e) => errors.push(`${name}: ${e.message}`));
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(out, `${name}.png`), fullPage: true });
}

/** Waits until `fn(arg)` holds in the page; false (not an exception) past the deadline. */
async function until(page, fn, arg) {
  try {
    await page.waitForFunction(fn, { timeout: DEADLINE_MS }, arg);
    return true;
  } catch {
    return false;
  }
}

async function main() {
  const work = mkdtempSync(join(tmpdir(), "cra-console-work-"));
  const { server, base } = await startServer(args.cra, work, Object.values(KEYS));
  const browser = await launch(args.chromium);
  const errors = [];
  try {
    const bot = client(base, KEYS.bot);
    const operator = client(base, KEYS.operator);

    // Sign in; the console's answer carries the policy.
    const page = await openPage(browser, "operator", errors);
    const first = await signIn(page, base, KEYS.operator);
    const csp = first.headers()["content-security-policy"] || "";
    check("the console is sent with a Content-Security-Policy forbidding inline script",
      /script-src 'self'(;|$)/.test(csp) && !csp.includes("unsafe-inline") && !csp.includes("unsafe-eval"), csp);
    check("signing in keeps the key out of the URL", !page.url().includes(KEYS.operator.token), page.url());
    const stored = await page.evaluate(() => Object.values(sessionStorage));
    check("the key is kept in session storage", stored.includes(KEYS.operator.token));
    check("the live view connects", await until(page, () => document.querySelector(".status.live")));

    // An event appended through the API appears in the live view.
    const opened = await bot("POST", "/v1/sessions", { agent_id: "bot", goal: "console browser test" });
    check("an agent opens a session", opened.status === 201, JSON.stringify(opened.body));
    const session = opened.body.session_id;
    check("its event appears in the live view within 10 s", await until(page,
      (id) => [...document.querySelectorAll("#live-events .session a")].some((a) => a.textContent === id), session));

    // A payload holding HTML and script is shown as the text it is.
    const read = await act(bot, session, "doc.read", { page: HOSTILE });
    check("doc.read with an HTML parameter runs", read.first.status === 200, JSON.stringify(read.first.body));
    // The payload is shown as JSON, so the quotes in it are escaped; the script tag is verbatim.
    const shown = await until(page, (text) => [...document.querySelectorAll("#live-events .payload pre")]
      .some((pre) => pre.textContent.includes(text)), "<script>window.__hostile=2</script>");
    check("the hostile payload is shown as text", shown);
    const hostile = await page.evaluate(() => ({
      ran: window.__hostile ?? null,
      img: document.querySelectorAll("#live-events img").length,
      script: document.querySelectorAll("#live-events script").length,
    }));
    check("the hostile payload made no element and ran no script",
      hostile.ran === null && hostile.img === 0 && hostile.script === 0, JSON.stringify(hostile));
    await page.evaluate(() => document.querySelector("#live-events details")?.setAttribute("open", ""));
    await shot(page, "live");

    // An approval granted from the console lets the gated call run.
    const deploy = await act(bot, session, "deploy.run", { version: "1.2.3" });
    check("deploy.run waits for an approval", deploy.first.status === 409, JSON.stringify(deploy.first.body));
    const pending = (await operator("GET", "/v1/approvals")).body.filter((a) => a.session_id === session);
    check("one approval is pending for the session", pending.length === 1, JSON.stringify(pending));
    const approval = pending[0]?.approval_id;
    await page.goto(`${base}/console/#/approvals`);
    const card = `section.approval[data-approval="${approval}"]`;
    check("the approval is in the console's queue", await until(page, (sel) => document.querySelector(sel), card));
    check("its card shows the exact call", await until(page,
      (sel) => document.querySelector(sel)?.textContent.includes("1.2.3"), card));
    await shot(page, "approvals");
    await page.type(`${card} input[name=note]`, "checked in the console");
    await page.click(`${card} button.grant`);
    check("the granted approval leaves the queue", await until(page, (sel) => !document.querySelector(sel), card));
    check("the history shows the grant and its note", await until(page,
      (id) => [...document.querySelectorAll("#approval-history tr")]
        .some((tr) => tr.textContent.includes(id) && tr.textContent.includes("checked in the console")), approval));
    const ran = await deploy.again();
    check("the gated call runs once granted", ran.status === 200, JSON.stringify(ran.body));

    // A session page shows the chain the server verified.
    await page.goto(`${base}/console/#/sessions/${session}`);
    check("the session page shows a verified chain", await until(page,
      () => document.querySelector("#verification .badge-ok")?.textContent === "verified"));
    check("the timeline lists the approval's grant", await until(page,
      () => [...document.querySelectorAll("#timeline .type")].some((t) => t.textContent === "approval.granted")));
    await shot(page, "session");

    // Relay: a project with a package and a fact, for its pages.
    const made = await operator("POST", "/v1/projects", { project_id: "proj-a", name: "Project A" });
    check("a Relay project is created", made.status === 201, JSON.stringify(made.body));
    await operator("POST", "/v1/projects/proj-a/facts", { subject: "svc-a", predicate: "owner", value: "team-x" });
    await operator("POST", "/v1/projects/proj-a/packages", {
      package_id: `pkg_${randomUUID().replaceAll("-", "")}`, project_id: "proj-a", relay_version: "0.1",
      title: "Handoff <b>one</b>", status: "complete", package_type: "standard", review_type: "none",
      created_at: new Date().toISOString(), created_by: { id: "oscar", type: "human", session_id: null },
    });

    for (const [name, hash, selector] of [
      ["sessions", "#/sessions", "#sessions-table"],
      ["atlases", "#/atlases", "#atlases-table"],
      ["atlas", "#/atlases/test.trace.ops", "#policies-table"],
      ["relay", "#/relay", "#projects-table"],
      ["project", "#/relay/proj-a", "#facts-table"],
      ["health", "#/health", "#metrics-table"],
    ]) {
      await page.goto(`${base}/console/${hash}`);
      check(`the ${name} page renders`, await until(page, (sel) => document.querySelector(sel), selector));
      await shot(page, name);
    }
    await page.goto(`${base}/console/#/relay/proj-a`);
    check("the project's package and fact are listed", await until(page, () =>
      document.querySelector("#packages-table")?.textContent.includes("Handoff <b>one</b>")
      && document.querySelector("#facts-table")?.textContent.includes("team-x")));
    // As of a time before the fact was asserted, it was not valid.
    await page.$eval("input[name=as_of]", (input) => {
      input.value = "2020-01-01T00:00:00";
      input.dispatchEvent(new Event("change"));
    });
    check("the as-of picker shows the facts valid then", await until(page, () =>
      document.querySelector("#facts-table tbody")?.childElementCount === 0));

    const order = await page.goto(`${base}/console/#/atlases/test.trace.ops`)
      .then(() => until(page, () => document.querySelector("#policies-table")))
      .then(() => page.$$eval("#policies-table tbody tr td:nth-child(2)", (tds) => tds.map((t) => t.textContent)));
    check("policies are listed in evaluation order (deny first, allow last)",
      order[0] === "deny-drop" && order.at(-1) === "allow-work", JSON.stringify(order));

    // The API's interactive documentation (Swagger UI, vendored) on this server's description.
    const docs = await page.goto(`${base}/docs/`);
    check("the API docs are sent without inline script",
      /script-src 'self'(;|$)/.test(docs.headers()["content-security-policy"] || ""));
    check("the API docs list the operations", await until(page,
      () => document.querySelectorAll(".opblock").length > 40));
    await shot(page, "docs");

    // An agent's key: another agent's session is refused by the API behind the view.
    const agentErrors = [];
    const agent = await openPage(browser, "agent", agentErrors);
    await signIn(agent, base, KEYS.eve);
    check("an agent's key opens on its sessions, not the operators' stream",
      await until(agent, () => document.querySelector("#sessions-table")));
    check("the page says who signed in", await until(agent,
      () => document.querySelector("#who").textContent === "eve (agent)"));
    const status = await agent.evaluate(async (id) => (await fetch(`/v1/sessions/${id}`, {
      headers: { Authorization: `Bearer ${sessionStorage.getItem("cra.console.key")}` },
    })).status, session);
    check("an agent's key is refused another agent's session (403)", status === 403, String(status));
    await agent.goto(`${base}/console/#/sessions/${session}`);
    check("the page says the server refused it", await until(agent,
      () => document.querySelector("#main .problem")?.textContent.startsWith("forbidden")));
    await shot(agent, "agent-refused");
    const unexpected = agentErrors.filter((e) => !/status of 403/.test(e));
    errors.push(...unexpected);
  } finally {
    await browser.close();
    server.kill("SIGTERM");
  }
  check("no errors in the browser's console", errors.length === 0, errors.join("\n      "));
  console.log(`screenshots: ${out}`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`FAIL  the run stopped: ${e.stack || e}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
