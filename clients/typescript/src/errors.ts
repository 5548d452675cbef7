/**
 * The one error a cra server answers (`specs/errors.md`), as an exception: its HTTP status, its
 * token (`forbidden`, `invalid_request`, ...), a message for people and, when the input was at
 * fault, the JSON pointer of each bad field. A transport failure has status 0 and token
 * `unavailable`.
 */
export class CraError extends Error {
  constructor(
    readonly status: number,
    readonly token: string,
    message: string,
    readonly pointers: string[] = [],
    readonly body: unknown = undefined,
  ) {
    super(`${status} ${token}: ${message}`);
    this.name = "CraError";
    this.detail = message;
  }

  /** The server's message, without the status and token. */
  readonly detail: string;

  /** The first bad field's JSON pointer, if the input was at fault. */
  get pointer(): string | undefined {
    return this.pointers[0];
  }

  /** Reads an error body; a body of another shape becomes `unexpected_answer`. */
  static fromBody(status: number, body: unknown): CraError {
    if (isRecord(body) && typeof body["error"] === "string") {
      const details = body["details"];
      const errors = isRecord(details) && Array.isArray(details["errors"]) ? details["errors"] : [];
      const pointers = errors.flatMap((e: unknown) =>
        isRecord(e) && typeof e["pointer"] === "string" ? [e["pointer"]] : [],
      );
      return new CraError(status, body["error"], String(body["message"] ?? ""), pointers, body);
    }
    return new CraError(status, "unexpected_answer", `an answer without an error body: ${JSON.stringify(body)}`);
  }
}

/** A JSON object. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
