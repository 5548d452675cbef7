// The console's one way to the server: every call carries the key signed in with, so what the
// page shows is what the server grants that key (an agent's key sees its own sessions only).

const KEY = "cra.console.key";

/** An answer other than 2xx, with the API's error body when it sent one. */
export class ApiError extends Error {
  constructor(status, body) {
    const wire = body && typeof body === "object" ? body : {};
    super(wire.message || `HTTP ${status}`);
    this.status = status;
    this.token = typeof wire.error === "string" ? wire.error : "";
    const first = wire.details && Array.isArray(wire.details.errors) ? wire.details.errors[0] : null;
    this.pointer = first ? first.pointer : "";
  }
}

/** The key in this tab's session storage (never in a URL, gone with the tab). */
export function storedKey() {
  return sessionStorage.getItem(KEY);
}

export function storeKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
}

/** `GET`/`POST` to the API; JSON in and out; throws [`ApiError`] on a refusal. */
export async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${storedKey() || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await resp.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!resp.ok) throw new ApiError(resp.status, parsed);
  return parsed;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body);

/** The unpadded base64url of a string's UTF-8 bytes (the bearer subprotocol's form). */
function base64url(text) {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/**
 * Opens a trace stream (`params` as the route's query). A browser cannot set `Authorization`
 * on a WebSocket, so the key travels as the subprotocol `cra.bearer.<base64url>` beside
 * `cra.trace.v1`, which the server selects (specs/http.md, "Live streams").
 */
export function stream(params, onEvent, onClose) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = new URLSearchParams(params).toString();
  const socket = new WebSocket(`${scheme}//${location.host}/v1/traces/stream?${query}`, [
    "cra.trace.v1",
    `cra.bearer.${base64url(storedKey() || "")}`,
  ]);
  socket.addEventListener("message", (m) => {
    try {
      onEvent(JSON.parse(m.data));
    } catch (e) {
      console.warn("a stream message is not JSON", e);
    }
  });
  socket.addEventListener("close", (c) => onClose && onClose(c));
  return socket;
}
