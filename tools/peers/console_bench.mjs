// The console under load, measured in Debian's chromium (`cargo xtask bench`, step `console`):
// a `cra serve` holding N sessions, the live view open while the API appends R events a second.
//
//   node tools/peers/console_bench.mjs --cra target/release/cra [--sessions 10000] [--rate 1000]
//        [--seconds 10] [--chromium PATH]
//
// Prints one JSON object (figures in milliseconds):
//   seed           how long opening the sessions took (the server's work, not the page's)
//   sessions_page  navigation to the sessions page until its table is drawn, per run
//   live           while R events a second are appended (each session's end: one event each):
//                  events sent and rate reached, events the live view drew, the delay from an
//                  event's timestamp to its row in the page (p50, p99, max), and the main
//                  thread's lag (a 50 ms timer's lateness: p50, p99, max)
//   under load     then, the load going on, a click to the sessions page until its table is
//                  drawn, and a session's page until its verified timeline is
// "Responsive" is read from these: the view keeps up (drawn equals sent, delay p99 well under a
// second) and the page answers a click within a few hundred milliseconds.

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { client, launch, signIn, startServer } from "./console_common.mjs";

const { values: args } = parseArgs({
  options: {
    cra: { type: "string" },
    sessions: { type: "string", default: "10000" },
    rate: { type: "string", default: "1000" },
    seconds: { type: "string", default: "10" },
    chromium: { type: "string", default: process.env.CHROMIUM || "/usr/bin/chromium" },
    help: { type: "boolean", short: "h" },
  },
});
if (args.help || !args.cra) {
  console.error("usage: node tools/peers/console_bench.mjs --cra BIN [--sessions N] [--rate R] [--seconds S]");
  process.exit(args.help ? 0 : 2);
}
const SESSIONS = Number(args.sessions);
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const KEYS = [
  { token: "bench-operator-key-0000", actor: "oscar", type: "human", roles: ["operator"] },
  { token: "bench-agent-key-0000000", actor: "bot", type: "agent", roles: ["agent"] },
];
// The load is one agent's: its quota and the per-key rate limit are raised past it.
const CONFIG = `[limits]\nrequests_per_second = 100000\nburst = 100000\n\n[quotas]\nmax_open_sessions = ${SESSIONS * 2}\n`;

function summary(values) {
  const v = [...values].sort((a, b) => a - b);
  const at = (q) => (v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : null);
  return { n: v.length, p50: at(0.5), p99: at(0.99), max: v.length ? v[v.length - 1] : null };
}

/** Runs `task(i)` for i in 0..count with `width` in flight. */
async function pool(count, width, task) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < count) await task(next++);
  }));
}

async function main() {
  const work = mkdtempSync(join(tmpdir(), "cra-console-bench-"));
  const { server, base } = await startServer(args.cra, work, KEYS, CONFIG);
  const bot = client(base, KEYS[1]);
  const browser = await launch(args.chromium);
  const result = { sessions: SESSIONS, rate: RATE, seconds: SECONDS };
  try {
    let began = performance.now();
    const ids = new Array(SESSIONS);
    await pool(SESSIONS, 32, async (i) => {
      const r = await bot("POST", "/v1/sessions", { agent_id: "bot", goal: `bench ${i}` });
      if (r.status !== 201) throw new Error(`opening session ${i}: ${r.status} ${JSON.stringify(r.body)}`);
      ids[i] = r.body.session_id;
    });
    result.seed_ms = performance.now() - began;

    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 860 });
    await signIn(page, base, KEYS[0]);
    const loads = [];
    for (let run = 0; run < 3; run += 1) {
      await page.goto(`${base}/console/#/health`);
      await page.waitForSelector("#metrics-table");
      began = performance.now();
      await page.goto(`${base}/console/#/sessions`);
      await page.waitForSelector("#sessions-table", { timeout: 60_000 });
      loads.push(performance.now() - began);
    }
    result.sessions_page_ms = summary(loads);

    // The live view, with probes: each drawn row's delay, and the main thread's lateness.
    await page.goto(`${base}/console/#/live`);
    await page.waitForSelector(".status.live");
    await page.evaluate(() => {
      window.__delays = [];
      window.__lag = [];
      let last = performance.now();
      window.__probe = setInterval(() => {
        const now = performance.now();
        window.__lag.push(Math.max(0, now - last - 50));
        last = now;
      }, 50);
      new MutationObserver((changes) => {
        const now = Date.now();
        for (const c of changes) {
          for (const row of c.addedNodes) {
            const t = row.querySelector && row.querySelector("time");
            if (t) window.__delays.push(now - Date.parse(t.textContent));
          }
        }
      }).observe(document.getElementById("live-events"), { childList: true });
    });

    // R events a second: the seeded sessions end, one `session.ended` each, paced per 100 ms.
    const total = Math.min(SESSIONS, RATE * SECONDS);
    const perTick = Math.max(1, Math.round(RATE / 10));
    let sent = 0;
    began = performance.now();
    const load = (async () => {
      for (let tick = 0; sent < total; tick += 1) {
        const due = began + tick * 100;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const batch = ids.slice(sent, Math.min(total, sent + perTick));
        sent += batch.length;
        await Promise.all(batch.map((id) => bot("DELETE", `/v1/sessions/${id}`)));
      }
    })();
    // For 70% of the load the live view alone is watched; then a click on a session must be
    // answered while the stream goes on pouring in.
    await new Promise((r) => setTimeout(r, SECONDS * 700));
    await new Promise((r) => setTimeout(r, 500)); // what was sent by then has had time to arrive
    const watched = (performance.now() - began) / 1000;
    const sentWhileWatched = sent;
    const probes = await page.evaluate(() => {
      clearInterval(window.__probe);
      return { delays: window.__delays, lag: window.__lag };
    });
    result.live = {
      watched_s: watched,
      sent: sentWhileWatched,
      rate_reached: sentWhileWatched / watched,
      drawn: probes.delays.length,
      delay_ms: summary(probes.delays),
      main_thread_lag_ms: summary(probes.lag),
    };
    const target = ids[SESSIONS - 1];
    const clicked = performance.now();
    await page.click(`a[href="#/sessions"]`);
    await page.waitForSelector("#sessions-table", { timeout: 60_000 });
    result.sessions_page_under_load_ms = performance.now() - clicked;
    const opened = performance.now();
    await page.goto(`${base}/console/#/sessions/${target}`);
    await page.waitForSelector("#verification .badge-ok", { timeout: 60_000 });
    result.session_page_under_load_ms = performance.now() - opened;
    await load;
    result.load_s = (performance.now() - began) / 1000;
  } finally {
    await browser.close();
    server.kill("SIGTERM");
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => {
  console.error(`console bench: ${e.stack || e}`);
  process.exit(1);
});
