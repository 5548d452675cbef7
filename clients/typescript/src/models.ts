/**
 * Typed shapes of what the client sends and reads. Each interface named in `CHECKED` (below)
 * has, member for member, the schema of the same name in `schemas/openapi.json`: its types and
 * which members are optional. `test/openapi.test.ts` reads this file with the TypeScript
 * compiler and compares, so a schema change the client does not follow fails its tests.
 *
 * CARP's own bodies (resolutions, execute responses, approvals) are read as {@link Json}
 * objects; TRACE events as {@link TraceEvent} (`schemas/trace-event.schema.json`).
 */

/** A JSON object as read. */
export type Json = Record<string, any>;

/** `POST /v1/sessions`. */
export interface CreateSession {
  agent_id: string;
  goal: string;
  parent_session_id?: string | null;
  project_id?: string | null;
}

/** A session as the server answers it. */
export interface SessionView {
  session_id: string;
  agent_id: string;
  callsign: string;
  status: string;
  started_at: string;
  event_count: number;
  stored_bytes: number;
  ended_at?: string | null;
  goal?: string | null;
  parent_session_id?: string | null;
  project_id?: string | null;
}

/** `POST /v1/approvals/{id}`. */
export interface DecideBody {
  decision: "grant" | "reject";
  note?: string | null;
}

/** `GET /v1/health`. */
export interface Health {
  status: string;
  version: string;
  started_at: string;
  store: string;
  atlases: number;
  replica_id: string;
  leader: boolean;
  clock_offset_ms?: number | null;
  store_error?: string | null;
  problems?: string[];
}

/** `GET /v1/log/proof/inclusion`: hashes in hex. */
export interface InclusionProof {
  leaf_index: number;
  tree_size: number;
  hashes: string[];
}

/** `GET /v1/log/proof/consistency`: hashes in hex. */
export interface ConsistencyProof {
  hashes: string[];
}

/** One bad field of a refused request. */
export interface FieldError {
  pointer: string;
  message: string;
}

/** A TRACE/1.0 event (`schemas/trace-event.schema.json`). */
export interface TraceEvent {
  trace_version: string;
  event_id: string;
  trace_id: string;
  span_id: string;
  parent_span_id: string | null;
  session_id: string;
  sequence: number;
  timestamp: string;
  event_type: string;
  payload: Json;
  event_hash: string;
  previous_event_hash: string;
}

/** The interfaces above that `schemas/openapi.json` defines, by its schema names. */
export const CHECKED = [
  "CreateSession", "SessionView", "DecideBody", "Health", "InclusionProof", "ConsistencyProof",
  "FieldError",
] as const;
