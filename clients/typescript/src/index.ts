/**
 * `@cra/client`: a TypeScript client for cra, the governed-context runtime for AI agents.
 *
 * - {@link Client}: sessions, CARP resolve and execute, approvals, TRACE chains and live
 *   streams with resume, Relay projects, packages and facts, the transparency log's proofs.
 * - {@link verifyChain}: a TRACE chain checked offline (Appendix B).
 * - {@link openCheckpoint}, {@link verifyInclusion}, {@link verifyConsistency}: C2SP
 *   checkpoints and RFC 9162 proofs.
 */
export { CARP_VERSION, Client, OPERATIONS, utcNow } from "./client.js";
export type { ClientOptions, DepositOptions, FactQuery, RequestOptions, ResolveOptions } from "./client.js";
export { eventHash, GENESIS, readChain, readEvent, verifyChain } from "./chain.js";
export type { Finding } from "./chain.js";
export { CraError } from "./errors.js";
export { canonical, canonicalExact, parseExact, pythonFloat } from "./json.js";
export { LogError, leafHash, nodeHash, openCheckpoint, verifyConsistency, verifyInclusion, VerifierKey } from "./log.js";
export type { Checkpoint } from "./log.js";
export type * from "./models.js";
export { CHECKED } from "./models.js";
export { follow, RESUMABLE, StreamClosed, WebSocketClient } from "./stream.js";
