/**
 * Offline verification of a TRACE/1.0 chain (the spec's Appendix B). An auditor needs no server
 * and no trust in it: each event's hash is recomputed from its fields (the payload's canonical
 * JSON, `json.ts`), each event names its predecessor's hash (the first, 64 zeros), and sequences
 * run 0, 1, 2, ... without a gap. The finding codes are `cra trace verify`'s.
 *
 * Events read by this client ({@link readChain}, `Client.trace`) keep their payload's canonical
 * text as read, so numbers JavaScript would change (`1.0`, integers past 2^53) hash as written.
 * Events built or changed in JavaScript are hashed from their values.
 */
import { createHash } from "node:crypto";

import { isRecord } from "./errors.js";
import { canonical, canonicalExact, ExactNumber, ExactObject, parseExact, type Exact } from "./json.js";
import type { TraceEvent } from "./models.js";

export const GENESIS = "0".repeat(64);

const TEXT_FIELDS = [
  "trace_version", "event_id", "trace_id", "span_id", "session_id", "timestamp", "event_type",
  "event_hash", "previous_event_hash",
] as const;

/** Why a chain does not verify: the first problem, at `index` (0-based). */
export interface Finding {
  index: number;
  code: "malformed_event" | "sequence_gap" | "invalid_genesis" | "chain_broken" | "hash_mismatch";
  message: string;
}

/** What was read from the text of an event, kept until the event object changes hands. */
interface AsRead {
  /** The payload's canonical text from its JSON values (to notice a later edit). */
  plainPayload: string;
  /** ... and from its text, exactly. */
  exactPayload: string;
  sequence: string;
}
const asRead = new WeakMap<object, AsRead>();

/** The lowercase hex SHA-256 Appendix B computes for `event`. */
export function eventHash(event: TraceEvent): string {
  const read = asRead.get(event);
  const payload = canonical(event.payload);
  const parts = [
    event.trace_version, event.event_id, event.trace_id, event.span_id,
    event.parent_span_id ?? "", event.session_id,
    read !== undefined && Number(read.sequence) === event.sequence ? read.sequence : String(event.sequence),
    event.timestamp, event.event_type,
    // A payload replaced or edited after reading is hashed from its values.
    read !== undefined && payload === read.plainPayload ? read.exactPayload : payload,
    event.previous_event_hash,
  ];
  return createHash("sha256").update(parts.join(""), "utf8").digest("hex");
}

function shapeProblem(event: unknown): string | undefined {
  if (!isRecord(event)) return "the event is not a JSON object";
  for (const name of TEXT_FIELDS) {
    if (typeof event[name] !== "string") return `field \`${name}\` is missing or not a string`;
  }
  const parent = event["parent_span_id"];
  if (parent !== undefined && parent !== null && typeof parent !== "string") {
    return "field `parent_span_id` must be a string or null";
  }
  const sequence = event["sequence"];
  if (typeof sequence !== "number" || !Number.isInteger(sequence) || sequence < 0) {
    return "field `sequence` must be a non-negative integer";
  }
  if (!isRecord(event["payload"])) return "field `payload` must be an object";
  return undefined;
}

/** `undefined` when `events` (in order) form one valid chain, else the first finding. */
export function verifyChain(events: readonly unknown[]): Finding | undefined {
  let previous = GENESIS;
  for (const [index, event] of events.entries()) {
    const problem = shapeProblem(event);
    if (problem !== undefined) return { index, code: "malformed_event", message: problem };
    const e = event as TraceEvent;
    if (e.sequence !== index) {
      return { index, code: "sequence_gap", message: `sequence is ${e.sequence}, expected ${index}` };
    }
    if (e.previous_event_hash !== previous) {
      const code = index === 0 ? "invalid_genesis" : "chain_broken";
      return { index, code, message: "previous_event_hash does not name the event before it" };
    }
    const computed = eventHash(e);
    if (computed !== e.event_hash) {
      return { index, code: "hash_mismatch", message: `event_hash is ${e.event_hash}, computed ${computed}` };
    }
    previous = computed;
  }
  return undefined;
}

/** Reads one event's JSON text, keeping its payload's canonical text as written. */
export function readEvent(text: string): TraceEvent {
  return remember(JSON.parse(text) as TraceEvent, parseExact(text));
}

/** Reads a chain: a JSON array of events (`GET /v1/traces/{id}`) or a `.trace.jsonl` export. */
export function readChain(text: string): TraceEvent[] {
  if (text.trimStart().startsWith("[")) {
    const plain = JSON.parse(text) as TraceEvent[];
    const exact = parseExact(text) as Exact[];
    return plain.map((event, i) => remember(event, exact[i] ?? null));
  }
  return text.split("\n").filter((line) => line.trim() !== "").map(readEvent);
}

function remember(event: TraceEvent, exact: Exact): TraceEvent {
  if (isRecord(event) && exact instanceof ExactObject) {
    const payload = exact.get("payload");
    const sequence = exact.get("sequence");
    if (payload instanceof ExactObject && sequence instanceof ExactNumber) {
      asRead.set(event, {
        plainPayload: canonical(event.payload),
        exactPayload: canonicalExact(payload),
        sequence: sequence.text,
      });
    }
  }
  return event;
}
