// The console's pages. Each view renders into `main` and returns a function that stops what it
// started (a stream, a timer) when the operator leaves the page.

import { get, post, stream } from "./api.js";
import { badge, h, json, problem, replace, table } from "./dom.js";

/** The rows the live view keeps (the oldest go first). */
const LIVE_ROWS = 500;
/** Sessions listed per page. */
const SESSIONS_PAGE = 100;

/** What an event's payload says of its action, decision, policy and approval (as `cra trace tail`). */
export function summary(event) {
  const p = event.payload && typeof event.payload === "object" ? event.payload : {};
  const text = (k) => (typeof p[k] === "string" ? p[k] : undefined);
  const actions = Array.isArray(p.actions) ? p.actions.filter((a) => typeof a === "string") : [];
  return {
    action: text("action_id") || (actions.length ? actions.join(",") : undefined),
    decision: text("decision") || text("decision_type") || text("result") || text("status")
      || (p.decision && typeof p.decision.type === "string" ? p.decision.type : undefined),
    policy: text("policy_id"),
    approval: text("approval_id"),
  };
}

const sessionLink = (id) => h("a", { href: `#/sessions/${encodeURIComponent(id)}` }, id);

/** One event as a row that opens on its payload. */
function eventRow(event, { withSession }) {
  const s = summary(event);
  return h("details", { class: "event", dataset: { type: event.event_type || "" } },
    h("summary", {},
      h("time", {}, event.timestamp || ""),
      withSession ? h("span", { class: "session" }, sessionLink(event.session_id || ""), `#${event.sequence}`)
        : h("span", { class: "seq" }, `#${event.sequence}`),
      h("span", { class: "type" }, event.event_type || ""),
      s.action ? h("span", { class: "field" }, "action ", h("b", {}, s.action)) : null,
      s.decision ? badge(s.decision) : null,
      s.policy ? h("span", { class: "field" }, "policy ", h("b", {}, s.policy)) : null,
      s.approval ? h("span", { class: "field" }, "approval ", h("code", {}, s.approval)) : null),
    h("div", { class: "payload" },
      h("p", { class: "hash" }, "hash ", h("code", {}, event.event_hash || "")),
      json(event.payload)));
}

/** The live stream of every session, with filters; reconnects when they change. */
export function live(main, operator) {
  if (!operator) {
    replace(main, h("h1", {}, "Live events"), h("p", { class: "empty" },
      "The stream of every session is for operators. Your own sessions, each streamed live, are under ",
      h("a", { href: "#/sessions" }, "Sessions"), "."));
    return undefined;
  }
  const status = h("span", { class: "status" }, "connecting");
  const rows = h("div", { class: "events", id: "live-events" });
  const inputs = {
    type: h("input", { name: "type", placeholder: "event type prefix, e.g. action." }),
    agent: h("input", { name: "agent", placeholder: "agent id" }),
    decision: h("input", { name: "decision", placeholder: "decision, e.g. deny" }),
  };
  let socket = null;
  let stopped = false;
  const connect = () => {
    if (socket) socket.close(1000);
    const params = { all: "true" };
    for (const [name, input] of Object.entries(inputs)) {
      if (input.value.trim()) params[name] = input.value.trim();
    }
    status.textContent = "connecting";
    const mine = stream(params, (event) => {
      rows.prepend(eventRow(event, { withSession: true }));
      while (rows.childElementCount > LIVE_ROWS) rows.lastElementChild.remove();
    }, (close) => {
      if (socket !== mine || stopped) return;
      status.textContent = `closed (${close.code}${close.reason ? `: ${close.reason}` : ""})`;
      status.className = "status closed";
    });
    mine.addEventListener("open", () => {
      status.textContent = "live";
      status.className = "status live";
    });
    socket = mine;
  };
  const form = h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); connect(); } },
    Object.values(inputs), h("button", { type: "submit" }, "Apply"));
  replace(main, h("h1", {}, "Live events ", status), form, rows);
  connect();
  return () => {
    stopped = true;
    if (socket) socket.close(1000);
  };
}

/** Every session the key may read, newest activity first, filtered and paged in the page. */
export async function sessions(main) {
  const chains = await get("/v1/traces");
  chains.sort((a, b) => (b.last_timestamp || "").localeCompare(a.last_timestamp || ""));
  const filter = h("input", { name: "filter", placeholder: "filter by session or agent" });
  const body = h("div", {});
  let page = 0;
  const render = () => {
    const needle = filter.value.trim();
    const shown = needle
      ? chains.filter((c) => c.session_id.includes(needle) || c.agent_id.includes(needle))
      : chains;
    const pages = Math.max(1, Math.ceil(shown.length / SESSIONS_PAGE));
    page = Math.min(page, pages - 1);
    const slice = shown.slice(page * SESSIONS_PAGE, (page + 1) * SESSIONS_PAGE);
    replace(body,
      table(["session", "agent", "status", "events", "last event"], slice.map((c) => [
        sessionLink(c.session_id), c.agent_id, c.ended ? badge("ended") : badge("open"),
        String(c.event_count), c.last_timestamp,
      ]), { id: "sessions-table" }),
      h("p", { class: "pager" },
        h("button", { disabled: page === 0, onclick: () => { page -= 1; render(); } }, "Previous"),
        ` page ${page + 1} of ${pages} (${shown.length} sessions) `,
        h("button", { disabled: page + 1 >= pages, onclick: () => { page += 1; render(); } }, "Next")));
  };
  filter.addEventListener("input", () => { page = 0; render(); });
  replace(main, h("h1", {}, "Sessions"), filter, body);
  render();
}

/** One session: its record, the server's verification, its checkpoint, its timeline (live). */
export async function session(main, id) {
  const path = encodeURIComponent(id);
  const [record, events, verification] = await Promise.all([
    get(`/v1/sessions/${path}`),
    get(`/v1/traces/${path}`),
    post(`/v1/traces/${path}/verify`),
  ]);
  const timeline = h("div", { class: "events", id: "timeline" },
    events.map((e) => eventRow(e, { withSession: false })));
  const checkpoint = h("div", { id: "checkpoint" }, "checkpoint: reading");
  replace(main,
    h("h1", {}, "Session ", h("code", {}, id)),
    h("dl", { class: "facts" },
      h("dt", {}, "agent"), h("dd", {}, record.agent_id),
      h("dt", {}, "goal"), h("dd", {}, record.goal || ""),
      h("dt", {}, "status"), h("dd", {}, badge(record.status)),
      h("dt", {}, "started"), h("dd", {}, record.started_at),
      h("dt", {}, "events"), h("dd", {}, String(events.length)),
      h("dt", {}, "chain"), h("dd", { id: "verification" }, verification.valid
        ? badge("verified", "ok")
        : h("span", {}, badge("broken", "bad"), ` at event ${verification.first_error?.sequence}: ${verification.first_error?.message}`),
        ` (${verification.events} events checked by the server)`)),
    checkpoint,
    h("h2", {}, "Timeline"), timeline);
  showCheckpoint(checkpoint, events.at(-1));
  if (record.status === "ended") return undefined;
  const socket = stream({ session_id: id, since_seq: String(events.length) },
    (event) => timeline.append(eventRow(event, { withSession: false })));
  return () => socket.close(1000);
}

/** The signed checkpoint that covers a session's last event (the log's receipt). */
async function showCheckpoint(el, last) {
  if (!last) return replace(el, "checkpoint: the chain is empty");
  try {
    const receipt = await get(`/v1/log/receipt?event_hash=${encodeURIComponent(last.event_hash)}`);
    const note = receipt.checkpoint || receipt.proof || receipt;
    replace(el, h("details", {}, h("summary", {}, "Transparency log: covered by a signed checkpoint ",
      badge("logged", "ok")), json(note)));
  } catch (e) {
    replace(el, "Transparency log: ", problem(e));
  }
}

/**
 * The pending queue (with the exact call each gates), decisions, and the history, read again
 * every 5 s. A card stays as it is while its approval waits (a note being typed is kept, and
 * its call is read from the chain once); only cards that come or go change.
 */
export async function approvals(main) {
  const queue = h("div", { id: "approval-queue" });
  const empty = h("p", { class: "empty" }, "No approval is waiting.");
  const status = h("div", {});
  const history = h("div", { id: "approval-history" });
  const cards = new Map();
  const refresh = async () => {
    const [pending, decided] = await Promise.all([
      get("/v1/approvals"),
      get("/v1/approvals?status=decided&limit=50"),
    ]);
    const waiting = new Set(pending.map((a) => a.approval_id));
    for (const [id, card] of cards) {
      if (!waiting.has(id)) {
        card.remove();
        cards.delete(id);
      }
    }
    for (const a of pending) {
      if (!cards.has(a.approval_id)) {
        const card = approvalCard(a, refresh);
        cards.set(a.approval_id, card);
        queue.append(card);
      }
    }
    empty.hidden = cards.size > 0;
    replace(status);
    replace(history, table(["decided", "approval", "session", "actions", "decision", "by", "note"],
      decided.map((a) => [a.decided_at, h("code", {}, a.approval_id), sessionLink(a.session_id),
        a.actions.join(", "), badge(a.status), a.decided_by || "", a.note || ""])));
  };
  replace(main, h("h1", {}, "Approvals"), h("h2", {}, "Waiting"), empty, queue, status,
    h("h2", {}, "Decided"), history);
  await refresh();
  const timer = setInterval(() => refresh().catch((e) => replace(status, problem(e))), 5000);
  return () => clearInterval(timer);
}

/** One pending approval: what it gates (the call's parameters read from its chain) and the buttons. */
function approvalCard(a, refresh) {
  const note = h("input", { name: "note", placeholder: "note (optional)" });
  const call = h("div", { class: "call" }, a.call ? "reading the call" : "every action it names");
  const out = h("div", {});
  const decide = (decision) => async () => {
    try {
      await post(`/v1/approvals/${encodeURIComponent(a.approval_id)}`,
        note.value ? { decision, note: note.value } : { decision });
      await refresh();
    } catch (e) {
      replace(out, problem(e));
    }
  };
  if (a.call) showCall(call, a);
  return h("section", { class: "card approval", dataset: { approval: a.approval_id } },
    h("h3", {}, a.actions.join(", "), " ", badge(a.status)),
    h("dl", { class: "facts" },
      h("dt", {}, "approval"), h("dd", {}, h("code", {}, a.approval_id)),
      h("dt", {}, "agent"), h("dd", {}, a.agent_id),
      h("dt", {}, "session"), h("dd", {}, sessionLink(a.session_id)),
      h("dt", {}, "asked"), h("dd", {}, a.created_at)),
    call, note,
    h("button", { class: "grant", onclick: decide("grant") }, "Grant"),
    h("button", { class: "reject", onclick: decide("reject") }, "Reject"), out);
}

/** The execute request an approval gates, found in its session's chain by execution id. */
async function showCall(el, a) {
  try {
    const events = await get(`/v1/traces/${encodeURIComponent(a.session_id)}`);
    const asked = events.find((e) => e.payload && e.payload.execution_id === a.call.execution_id
      && e.payload.parameters !== undefined);
    replace(el, h("p", {}, "call ", h("b", {}, a.call.action_id), " of atlas ",
      h("code", {}, a.call.atlas_id), ", parameters ", h("code", {}, a.call.parameters_hash)),
    asked ? json(asked.payload.parameters) : h("p", {}, "(the parameters are not in the chain)"));
  } catch (e) {
    replace(el, problem(e));
  }
}

/** The atlases in force. */
export async function atlases(main) {
  const items = await get("/v1/atlases");
  replace(main, h("h1", {}, "Atlases"),
    table(["atlas", "version", "digest", "signature", "actions", "policies"], items.map((a) => [
      h("a", { href: `#/atlases/${encodeURIComponent(a.atlas_id)}` }, a.atlas_id), a.version,
      h("code", {}, a.digest), signature(a), String(a.actions), String(a.policies),
    ]), { id: "atlases-table" }));
}

/** `verified` (by a key the server trusts), `signed` (nothing checks it) or `unsigned`. */
function signature(a) {
  const status = a && a.signature ? a.signature : "unknown";
  return badge(status, status === "verified" ? "ok" : "pending");
}

/** The kinds of policy in the order CARP weighs them. */
const PRECEDENCE = ["deny", "require_approval", "rate_limit", "budget", "allow"];

/** Policies in evaluation order (specs/carp.md): by kind's precedence, then priority (highest first), then id. */
export function evaluationOrder(policies) {
  const rank = (p) => (PRECEDENCE.includes(p.type) ? PRECEDENCE.indexOf(p.type) : PRECEDENCE.length);
  // Ids compare as CARP compares them: by code unit, not by locale.
  const byId = (a, b) => (a.policy_id < b.policy_id ? -1 : a.policy_id > b.policy_id ? 1 : 0);
  return [...policies].sort((a, b) => rank(a) - rank(b) || (b.priority || 0) - (a.priority || 0)
    || byId(a, b));
}

/** Whether a policy's action pattern (`*` one segment, `**` any) names an action. */
function matches(pattern, action) {
  const p = pattern.split(".");
  const a = action.split(".");
  const walk = (i, j) => {
    if (i === p.length) return j === a.length;
    if (p[i] === "**") return [...Array(a.length - j + 1).keys()].some((k) => walk(i + 1, j + k));
    return j < a.length && (p[i] === "*" || p[i] === a[j]) && walk(i + 1, j + 1);
  };
  return walk(0, 0);
}

/** One atlas: its actions with the policies that reach each (coverage), its policies in order. */
export async function atlas(main, id) {
  const [m, all] = await Promise.all([get(`/v1/atlases/${encodeURIComponent(id)}`), get("/v1/atlases")]);
  const a = all.find((x) => x.atlas_id === m.atlas_id) || {};
  const policies = evaluationOrder(m.policies || []);
  const reaching = (action) => policies.filter((p) => (p.actions || []).some((x) => matches(x, action)));
  const actions = m.actions || [];
  const uncovered = actions.filter((x) => !reaching(x.action_id).some((p) => p.type === "allow"));
  replace(main,
    h("h1", {}, "Atlas ", h("code", {}, m.atlas_id || id), " ", m.version || ""),
    h("dl", { class: "facts" },
      h("dt", {}, "digest"), h("dd", {}, h("code", {}, a.digest || "")),
      h("dt", {}, "signature"), h("dd", {}, signature(a)),
      h("dt", {}, "coverage"), h("dd", { id: "coverage" },
        `${actions.length - uncovered.length} of ${actions.length} actions have an allowing policy`,
        uncovered.length ? `; default deny: ${uncovered.map((x) => x.action_id).join(", ")}` : "")),
    h("h2", {}, "Actions"),
    table(["action", "risk", "executor", "policies reaching it"], actions.map((x) => [
      h("code", {}, x.action_id), x.risk_tier || "", x.executor || "(agent runs it)",
      reaching(x.action_id).map((p) => `${p.policy_id} (${p.type})`).join(", ") || "none: default deny",
    ])),
    h("h2", {}, "Policies in evaluation order"),
    table(["#", "policy", "kind", "priority", "actions", "parameters"], policies.map((p, i) => [
      String(i + 1), h("code", {}, p.policy_id), badge(p.type), String(p.priority || 0),
      (p.actions || []).join(", "), p.parameters ? json(p.parameters) : "",
    ]), { id: "policies-table" }));
}

/** Relay: the projects the key reads, one project's packages and its facts as of a time. */
export async function relay(main, projectId) {
  if (!projectId) {
    const all = await get("/v1/orchestrate");
    const projects = all.projects || [];
    replace(main, h("h1", {}, "Relay projects"),
      projects.length ? table(["project", "name", "packages (14 days)", "awaiting review", "facts",
        "open questions"], projects.map((p) => [
        h("a", { href: `#/relay/${encodeURIComponent(p.project_id)}` }, p.project_id), p.name,
        String(p.packages_in_window), String(p.awaiting_review), String(p.active_facts),
        String(p.open_questions),
      ]), { id: "projects-table" }) : h("p", { class: "empty" }, "No project yet."));
    return;
  }
  const path = encodeURIComponent(projectId);
  const [project, latest, waiting] = await Promise.all([
    get(`/v1/projects/${path}`),
    get(`/v1/projects/${path}/packages?mode=latest&limit=50`),
    get(`/v1/projects/${path}/packages?status=awaiting_review`),
  ]);
  const asOf = h("input", { type: "datetime-local", name: "as_of", step: "1" });
  const facts = h("div", { id: "facts" });
  const showFacts = async () => {
    const q = asOf.value ? `?as_of=${encodeURIComponent(new Date(asOf.value).toISOString())}` : "";
    try {
      const answer = await get(`/v1/projects/${path}/facts${q}`);
      replace(facts, table(["subject", "predicate", "value", "valid from", "valid to", "asserted by"],
        answer.map((f) => [
          f.subject, f.predicate, typeof f.value === "string" ? f.value : JSON.stringify(f.value),
          f.valid_from, f.valid_to || "", f.asserted_by ? f.asserted_by.id : "",
        ]), { id: "facts-table" }));
    } catch (e) {
      replace(facts, problem(e));
    }
  };
  asOf.addEventListener("change", showFacts);
  const packageRows = (list) => list.packages.map((p) => [
    h("code", {}, p.package_id), p.title, p.package_type, badge(p.status),
    p.review_type,
    p.created_by ? p.created_by.id : "", p.created_at,
  ]);
  // The status is the review's state (draft, awaiting_review, revision_requested, complete).
  const columns = ["package", "title", "type", "status", "reviewed by", "by", "created"];
  replace(main,
    h("h1", {}, "Project ", h("code", {}, projectId), " ", project.name || ""),
    h("h2", {}, "Awaiting review"),
    table(columns, packageRows(waiting)),
    h("h2", {}, "Latest packages"),
    table(columns, packageRows(latest), { id: "packages-table" }),
    h("h2", {}, "Facts ", h("label", {}, "as of ", asOf)), facts);
  await showFacts();
}

/** The server's health and the metrics an operator watches. */
export async function health(main) {
  const [state, metrics] = await Promise.all([
    fetch("/v1/health", { cache: "no-store" }).then((r) => r.json()),
    get("/metrics").catch((e) => e),
  ]);
  const headline = typeof metrics === "string" ? headlineMetrics(metrics) : null;
  replace(main, h("h1", {}, "Health ", badge(state.status, state.status === "ok" ? "ok" : "bad")),
    json(state),
    h("h2", {}, "Headline metrics"),
    headline ? table(["metric", "value"], headline, { id: "metrics-table" }) : problem(metrics));
}

/** The figures worth a glance, summed over their labels, from Prometheus text. */
export function headlineMetrics(text) {
  const wanted = [
    ["cra_http_requests_total", "requests answered"],
    ["cra_resolutions_total", "resolutions"],
    ["cra_executions_total", "executions"],
    ["cra_trace_events_total", "TRACE events appended"],
    ["cra_approvals_pending", "approvals waiting"],
    ["cra_approvals_oldest_pending_age_seconds", "oldest waiting approval (s)"],
    ["cra_stream_subscribers", "stream subscribers"],
    ["cra_log_leaves", "log leaves"],
    ["cra_log_checkpoint_leaves", "leaves under the latest checkpoint"],
  ];
  const sums = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const name = line.split(/[{ ]/, 1)[0];
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (Number.isFinite(value)) sums.set(name, (sums.get(name) || 0) + value);
  }
  return wanted.filter(([name]) => sums.has(name)).map(([name, label]) => [label, String(sums.get(name))]);
}
