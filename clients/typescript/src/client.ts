/**
 * A client of a cra server's HTTP API (`specs/http.md`) on Node's own `fetch`.
 *
 * It fills in what CARP asks of every request (`carp_version`, a fresh `request_id`, the
 * `timestamp` and the requester), throws {@link CraError} for every refusal, and reads TRACE
 * chains for offline verification (`chain.ts`). Time and ids come from functions the caller may
 * replace, so tests are deterministic.
 */
import { randomUUID } from "node:crypto";

import { readChain } from "./chain.js";
import { CraError, isRecord } from "./errors.js";
import { openCheckpoint, verifyConsistency, verifyInclusion, VerifierKey, type Checkpoint } from "./log.js";
import type {
  ConsistencyProof, CreateSession, DecideBody, Health, InclusionProof, Json, SessionView, TraceEvent,
} from "./models.js";
import { follow, WebSocketClient } from "./stream.js";

/**
 * Every route this client calls, with the query parameters it may send: compared with
 * `schemas/openapi.json` by `test/openapi.test.ts`.
 */
export const OPERATIONS: ReadonlyArray<readonly [string, string, readonly string[]]> = [
  ["GET", "/v1/health", []],
  ["POST", "/v1/sessions", []],
  ["GET", "/v1/sessions/{session_id}", []],
  ["DELETE", "/v1/sessions/{session_id}", []],
  ["POST", "/v1/resolve", ["receipt"]],
  ["POST", "/v1/execute", ["receipt"]],
  ["GET", "/v1/approvals", ["status"]],
  ["GET", "/v1/approvals/{approval_id}", ["wait"]],
  ["POST", "/v1/approvals/{approval_id}", []],
  ["GET", "/v1/traces/{session_id}", []],
  ["GET", "/v1/traces/stream", ["session_id", "since_seq", "type"]],
  ["GET", "/v1/log/key", []],
  ["GET", "/v1/log/checkpoint", []],
  ["POST", "/v1/log/checkpoint", []],
  ["GET", "/v1/log/proof/inclusion", ["event_hash", "tree_size"]],
  ["GET", "/v1/log/proof/consistency", ["from", "to"]],
  ["POST", "/v1/projects", []],
  ["POST", "/v1/projects/{project_id}/packages", []],
  ["GET", "/v1/projects/{project_id}/packages", ["mode", "limit", "query"]],
  ["GET", "/v1/projects/{project_id}/orient", ["window_days"]],
  ["POST", "/v1/projects/{project_id}/facts", []],
  ["GET", "/v1/projects/{project_id}/facts", ["subject", "predicate", "as_of", "recorded_as_of", "history"]],
  ["DELETE", "/v1/projects/{project_id}/facts", ["subject", "predicate"]],
];

export const CARP_VERSION = "1.0";

/** The time now as CARP writes it: UTC, microseconds, `Z`. */
export function utcNow(): string {
  return new Date().toISOString().replace(/Z$/, "000Z");
}

/** How a {@link Client} is set up. */
export interface ClientOptions {
  /** The requester CARP requests name (an agent key may only name its own agent). */
  agentId?: string;
  /** Milliseconds before a request is given up (30 s). */
  timeoutMs?: number;
  /** The envelope's timestamp. */
  clock?: () => string;
  /** The envelope's request id (a random UUID). */
  ids?: () => string;
}

/** One request, as {@link Client.request} sends it. */
export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string>;
  timeoutMs?: number;
  /** Return a CARP execute response the server answered with an error status. */
  carpRefusals?: boolean;
}

/** What `resolve` adds to its task besides the goal. */
export interface ResolveOptions {
  receipt?: boolean;
  task?: Json;
}

/** A context package's members besides those `deposit` fills in (§6 of the Relay spec). */
export interface DepositOptions {
  packageType?: string;
  status?: string;
  reviewType?: string;
  actorType?: string;
  sessionId?: string;
  fields?: Json;
}

/** Which facts `facts` reads: current (none), valid at `asOf`, believed at `recordedAsOf`, or every row. */
export interface FactQuery {
  asOf?: string;
  recordedAsOf?: string;
  history?: boolean;
}

/** One server, one credential. */
export class Client {
  readonly url: string;
  readonly agentId: string | undefined;
  readonly timeoutMs: number;
  readonly clock: () => string;
  readonly ids: () => string;

  constructor(
    url: string,
    readonly token: string,
    options: ClientOptions = {},
  ) {
    this.url = url.replace(/\/+$/, "");
    this.agentId = options.agentId;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.clock = options.clock ?? utcNow;
    this.ids = options.ids ?? randomUUID;
  }

  // -- transport -------------------------------------------------------------------------

  /** The text of one answer; a refusal throws {@link CraError} (or, with `carpRefusals`, a
   * CARP execute response is returned as text). */
  async requestText(method: string, path: string, options: RequestOptions = {}): Promise<string> {
    const query = options.query ? `?${new URLSearchParams(options.query)}` : "";
    const url = this.url + path + query;
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, accept: "application/json" };
    if (options.body !== undefined) headers["content-type"] = "application/json";
    let answer: Response;
    let text: string;
    try {
      answer = await fetch(url, {
        method,
        headers,
        body: options.body === undefined ? null : JSON.stringify(options.body),
        signal: AbortSignal.timeout(options.timeoutMs ?? this.timeoutMs),
      });
      text = await answer.text();
    } catch (failed) {
      const why = failed instanceof Error ? `${failed.message}${causeOf(failed)}` : String(failed);
      throw new CraError(0, "unavailable", `${method} ${url}: ${why}`);
    }
    if (answer.ok) return text;
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Not JSON: CraError keeps the text.
    }
    if (options.carpRefusals && isRecord(parsed) && "carp_version" in parsed) return text;
    throw CraError.fromBody(answer.status, parsed);
  }

  /** Sends one request; answers the parsed JSON body (`undefined` when empty, text if not JSON). */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<any> {
    const text = await this.requestText(method, path, options);
    if (text === "") return undefined;
    return text.startsWith("{") || text.startsWith("[") ? JSON.parse(text) : text;
  }

  /** The members CARP asks of every request, filled in. */
  envelope(sessionId: string, operation: string): Json {
    const requester: Json = { session_id: sessionId };
    if (this.agentId !== undefined) requester["agent_id"] = this.agentId;
    return {
      carp_version: CARP_VERSION,
      request_id: this.ids(),
      timestamp: this.clock(),
      operation,
      requester,
    };
  }

  // -- sessions, resolve, execute, approvals, traces ------------------------------------

  /** `GET /v1/health`. */
  health(): Promise<Health> {
    return this.request("GET", "/v1/health");
  }

  /** Opens a session owned by `agentId` (default: the client's). */
  openSession(goal: string, options: { agentId?: string; parentSessionId?: string; projectId?: string } = {}): Promise<SessionView> {
    const owner = options.agentId ?? this.agentId;
    if (owner === undefined) throw new TypeError("name the session's agent: new Client(url, token, { agentId })");
    const body: CreateSession = { agent_id: owner, goal };
    if (options.parentSessionId !== undefined) body.parent_session_id = options.parentSessionId;
    if (options.projectId !== undefined) body.project_id = options.projectId;
    return this.request("POST", "/v1/sessions", { body });
  }

  /** `GET /v1/sessions/{id}`. */
  session(sessionId: string): Promise<SessionView> {
    return this.request("GET", `/v1/sessions/${seg(sessionId)}`);
  }

  /** Ends the session (idempotent). */
  async endSession(sessionId: string): Promise<void> {
    await this.request("DELETE", `/v1/sessions/${seg(sessionId)}`);
  }

  /** Asks what may be done for `goal` (CARP resolve); `task` adds members to the task. */
  resolve(sessionId: string, goal: string, options: ResolveOptions = {}): Promise<Json> {
    const body = this.envelope(sessionId, "resolve");
    body["task"] = { goal, ...options.task };
    return this.request("POST", "/v1/resolve", { body, ...receipt(options.receipt) });
  }

  /**
   * Executes `actionId` under a resolution (CARP execute). Answers the execute response whatever
   * its status: `success`, `error` (the action ran, or its executor failed), `denied` or
   * `pending_approval` (its `error.code` is the token; wait with {@link waitForDecision} on the
   * resolution's `decision.approval_id`, then execute the same call again). A request the
   * server did not admit throws {@link CraError}.
   */
  execute(sessionId: string, resolutionId: string, actionId: string, parameters: Json = {}, options: { receipt?: boolean } = {}): Promise<Json> {
    const body = this.envelope(sessionId, "execute");
    body["execution"] = { resolution_id: resolutionId, action_id: actionId, parameters };
    return this.request("POST", "/v1/execute", { body, carpRefusals: true, ...receipt(options.receipt) });
  }

  /** Approvals with `status` (auditor or operator keys). */
  async approvals(status = "pending"): Promise<Json[]> {
    const answer = await this.request("GET", "/v1/approvals", { query: { status } });
    return isRecord(answer) && Array.isArray(answer["approvals"]) ? answer["approvals"] : answer;
  }

  /** The approval as it stands; with `waitSeconds` (1-60), once it is decided or lapses. */
  approval(approvalId: string, waitSeconds = 0): Promise<Json> {
    const options: RequestOptions = { timeoutMs: this.timeoutMs + waitSeconds * 1000 };
    if (waitSeconds > 0) options.query = { wait: String(waitSeconds) };
    return this.request("GET", `/v1/approvals/${seg(approvalId)}`, options);
  }

  /** Long-polls until the approval is decided or lapses, or `seconds` pass. */
  async waitForDecision(approvalId: string, seconds = 300): Promise<Json> {
    const deadline = Date.now() + seconds * 1000;
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      const answer = await this.approval(approvalId, Math.max(1, Math.min(60, Math.floor(left))));
      if (answer["status"] !== "pending" || answer["lapsed"] || left <= 1) return answer;
    }
  }

  /** Grants or rejects a pending approval (operator keys). */
  decide(approvalId: string, decision: "grant" | "reject", note?: string): Promise<Json> {
    const body: DecideBody = { decision };
    if (note !== undefined) body.note = note;
    return this.request("POST", `/v1/approvals/${seg(approvalId)}`, { body });
  }

  /** The session's TRACE chain in order, read so that it verifies byte for byte offline. */
  async trace(sessionId: string): Promise<TraceEvent[]> {
    return readChain(await this.requestText("GET", `/v1/traces/${seg(sessionId)}`));
  }

  /**
   * The session's events from `sinceSeq` on, then live, each once and in order, until
   * `session.ended`; a broken connection (a server restart) is resumed where it broke.
   * `eventType` keeps events whose type starts so.
   */
  stream(sessionId: string, options: { sinceSeq?: number; eventType?: string; retryForMs?: number } = {}): AsyncGenerator<TraceEvent, void, undefined> {
    const connect = (nextSeq: number): Promise<WebSocketClient> => {
      const query = new URLSearchParams({ session_id: sessionId, since_seq: String(nextSeq) });
      if (options.eventType !== undefined) query.set("type", options.eventType);
      return WebSocketClient.open(`${this.url}/v1/traces/stream?${query}`, this.token, this.timeoutMs);
    };
    const follows: { sinceSeq?: number; retryForMs?: number } = {};
    if (options.sinceSeq !== undefined) follows.sinceSeq = options.sinceSeq;
    if (options.retryForMs !== undefined) follows.retryForMs = options.retryForMs;
    return follow(connect, follows);
  }

  // -- the transparency log --------------------------------------------------------------

  /** The log's verifier key as the server names it (pin it out of band to trust it). */
  async logKey(): Promise<VerifierKey> {
    return VerifierKey.parse(await this.requestText("GET", "/v1/log/key"));
  }

  /** The latest signed checkpoint (`cut`: one cut now, operators), opened with `key`. */
  async checkpoint(key: VerifierKey, options: { cut?: boolean } = {}): Promise<Checkpoint> {
    return openCheckpoint(await this.requestText(options.cut ? "POST" : "GET", "/v1/log/checkpoint"), key);
  }

  /** Checks that `event` is a leaf of the tree `checkpoint` signs; answers its index. */
  async verifyInLog(event: TraceEvent, checkpoint: Checkpoint): Promise<number> {
    const query = { event_hash: event.event_hash, tree_size: String(checkpoint.size) };
    const proof: InclusionProof = await this.request("GET", "/v1/log/proof/inclusion", { query });
    const hashes = proof.hashes.map((h) => Buffer.from(h, "hex"));
    verifyInclusion(Buffer.from(event.event_hash, "hex"), proof.leaf_index, checkpoint.size, hashes, checkpoint.root);
    return proof.leaf_index;
  }

  /** Checks that `next`'s tree extends `old`'s (a log never rewrites what it showed). */
  async verifyExtends(old: Checkpoint, next: Checkpoint): Promise<void> {
    const query = { from: String(old.size), to: String(next.size) };
    const proof: ConsistencyProof = await this.request("GET", "/v1/log/proof/consistency", { query });
    const hashes = proof.hashes.map((h) => Buffer.from(h, "hex"));
    verifyConsistency(old.size, next.size, old.root, next.root, hashes);
  }

  // -- Relay (Agentic Protocol v0.1) -----------------------------------------------------

  /** Creates a Relay project (and its audit chain). */
  createProject(projectId: string, name: string, members?: Json[]): Promise<Json> {
    const body: Json = { project_id: projectId, name };
    if (members !== undefined) body["members"] = members;
    return this.request("POST", "/v1/projects", { body });
  }

  /**
   * Deposits a context package; its id, version, creation time and creator are filled in (the
   * creator is the client's `agentId`). `fields` adds §6 members (`handoff_note`,
   * `decisions_made`, `open_questions`, `tags`, ...).
   */
  deposit(projectId: string, title: string, options: DepositOptions = {}): Promise<Json> {
    if (this.agentId === undefined) throw new TypeError("name the depositing actor: new Client(url, token, { agentId })");
    const body: Json = {
      package_id: `pkg_${this.ids().replaceAll("-", "")}`,
      project_id: projectId,
      relay_version: "0.1",
      title,
      status: options.status ?? "complete",
      package_type: options.packageType ?? "standard",
      review_type: options.reviewType ?? "none",
      created_at: this.clock(),
      created_by: { id: this.agentId, type: options.actorType ?? "agent", session_id: options.sessionId ?? null },
      ...options.fields,
    };
    return this.request("POST", `/v1/projects/${seg(projectId)}/packages`, { body });
  }

  /** Pulls packages, the latest or (`mode: "relevant"`) the best for `query`. */
  pull(projectId: string, options: { mode?: "latest" | "relevant"; limit?: number; query?: string } = {}): Promise<Json> {
    const query: Record<string, string> = { mode: options.mode ?? "latest", limit: String(options.limit ?? 20) };
    if (options.query !== undefined) query["query"] = options.query;
    return this.request("GET", `/v1/projects/${seg(projectId)}/packages`, { query });
  }

  /** The project's orientation bundle (recent packages, active facts, open questions). */
  orient(projectId: string, windowDays?: number): Promise<Json> {
    const options: RequestOptions = windowDays === undefined ? {} : { query: { window_days: String(windowDays) } };
    return this.request("GET", `/v1/projects/${seg(projectId)}/orient`, options);
  }

  /** Asserts a temporal fact (it supersedes the current one of its subject and predicate). */
  assertFact(projectId: string, subject: string, predicate: string, value: unknown, fields: Json = {}): Promise<Json> {
    const body = { subject, predicate, value, ...fields };
    return this.request("POST", `/v1/projects/${seg(projectId)}/facts`, { body });
  }

  /** Facts of `subject` and `predicate`: current, at `asOf`, believed at `recordedAsOf`, or `history`. */
  facts(projectId: string, subject: string, predicate: string, at: FactQuery = {}): Promise<Json[]> {
    const query: Record<string, string> = { subject, predicate };
    if (at.asOf !== undefined) query["as_of"] = at.asOf;
    if (at.recordedAsOf !== undefined) query["recorded_as_of"] = at.recordedAsOf;
    if (at.history) query["history"] = "true";
    return this.request("GET", `/v1/projects/${seg(projectId)}/facts`, { query });
  }

  /** Ends the current fact of `subject` and `predicate`; answers how many ended. */
  async invalidateFact(projectId: string, subject: string, predicate: string): Promise<number> {
    const answer = await this.request("DELETE", `/v1/projects/${seg(projectId)}/facts`, { query: { subject, predicate } });
    return Number(answer["invalidated"]);
  }
}

function receipt(wanted: boolean | undefined): Pick<RequestOptions, "query"> {
  return wanted ? { query: { receipt: "true" } } : {};
}

/** One path segment, percent-encoded. */
function seg(value: string): string {
  return encodeURIComponent(value);
}

function causeOf(error: Error): string {
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? ` (${cause.message})` : "";
}
