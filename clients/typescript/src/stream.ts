/**
 * Live TRACE streams (`GET /v1/traces/stream`, `specs/http.md`) over a WebSocket client of our
 * own (RFC 6455 over `node:net`/`node:tls`: Node 20 has no WebSocket client), with resume.
 *
 * A session's stream replays its chain from `since_seq`, then sends live events, one per text
 * message, each once and in order; it closes with 1000 after `session.ended`. When the
 * connection breaks (a server restart, the network, a slow-consumer close 4008), {@link follow}
 * connects again with `since_seq` one past the last event it yielded, so the caller sees every
 * event exactly once.
 */
import { createHash, randomBytes } from "node:crypto";
import { connect as connectTcp, type Socket } from "node:net";
import { connect as connectTls } from "node:tls";

import { readEvent } from "./chain.js";
import { CraError } from "./errors.js";
import type { TraceEvent } from "./models.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/**
 * Closes after which a stream resumes: the server going away (1001, a restart or a missed
 * ping), an abnormal or internal end (1006, 1011, 1012, 1013), a slow consumer (4008), events
 * of other replicas possibly missed (4009).
 */
export const RESUMABLE: ReadonlySet<number> = new Set([1001, 1006, 1011, 1012, 1013, 4008, 4009]);
const TEXT = 0x1;
const CLOSE = 0x8;
const PING = 0x9;
const PONG = 0xa;

/** The `Sec-WebSocket-Accept` a server answers to `key` (RFC 6455 §4.2.2). */
export function acceptFor(key: string): string {
  return createHash("sha1").update(key + GUID).digest("base64");
}

/** The server closed the stream on purpose (`code`, `reason`). */
export class StreamClosed extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
  ) {
    super(`stream closed: ${code} ${reason}`);
    this.name = "StreamClosed";
  }
}

/** The connection broke without a close frame (as 1006 is reported). */
export class ConnectionLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConnectionLost";
  }
}

/** One client connection: text messages in, pings answered, closes reported. */
export class WebSocketClient {
  private buffer = Buffer.alloc(0);
  private ended: Error | undefined;
  private wake: (() => void) | undefined;

  private constructor(private readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.notify();
    });
    socket.on("error", (error) => this.finish(new ConnectionLost(error.message)));
    socket.on("close", () => this.finish(new ConnectionLost("the server closed the connection")));
  }

  /** Opens `url` (`ws:`, `wss:`, `http:` or `https:`) with a bearer `token`. */
  static async open(url: string, token: string, timeoutMs: number): Promise<WebSocketClient> {
    const target = new URL(url);
    const secure = target.protocol === "https:" || target.protocol === "wss:";
    const port = Number(target.port || (secure ? 443 : 80));
    const host = target.hostname.replace(/^\[|\]$/g, "");
    const socket = secure ? connectTls({ host, port, servername: host }) : connectTcp({ host, port });
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    await new Promise<void>((resolve, reject) => {
      socket.once(secure ? "secureConnect" : "connect", () => resolve());
      socket.once("error", (e) => reject(new ConnectionLost(e.message)));
    });
    const ws = new WebSocketClient(socket);
    const key = randomBytes(16).toString("base64");
    socket.write(
      `GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\n` +
        "Upgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n` +
        `Authorization: Bearer ${token}\r\n\r\n`,
    );
    await ws.handshake(key);
    socket.setTimeout(0);
    return ws;
  }

  private async handshake(key: string): Promise<void> {
    const head = (await this.readUntil("\r\n\r\n")).toString("latin1");
    const [statusLine = "", ...lines] = head.split("\r\n");
    const status = Number(statusLine.split(" ")[1]);
    const headers = new Map(
      lines.map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
    );
    if (status !== 101) {
      const body = (await this.readExactly(Number(headers.get("content-length") ?? 0))).toString();
      this.close();
      let parsed: unknown = body;
      try {
        parsed = JSON.parse(body);
      } catch {
        // Not JSON: CraError keeps the text.
      }
      throw CraError.fromBody(status, parsed);
    }
    if (headers.get("sec-websocket-accept") !== acceptFor(key)) {
      this.close();
      throw new CraError(0, "unexpected_answer", "the server's WebSocket handshake did not match");
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  private finish(error: Error): void {
    this.ended ??= error;
    this.notify();
  }

  private async fill(): Promise<void> {
    if (this.ended) throw this.ended;
    await new Promise<void>((resolve) => (this.wake = resolve));
  }

  private async readUntil(marker: string): Promise<Buffer> {
    for (;;) {
      const at = this.buffer.indexOf(marker);
      if (at >= 0) {
        const head = this.buffer.subarray(0, at);
        this.buffer = this.buffer.subarray(at + marker.length);
        return head;
      }
      await this.fill();
    }
  }

  private async readExactly(n: number): Promise<Buffer> {
    while (this.buffer.length < n) await this.fill();
    const out = this.buffer.subarray(0, n);
    this.buffer = this.buffer.subarray(n);
    return out;
  }

  private send(opcode: number, payload: Buffer): void {
    const mask = randomBytes(4);
    const length = payload.length;
    const header =
      length < 126
        ? Buffer.from([0x80 | opcode, 0x80 | length])
        : length < 65536
          ? Buffer.from([0x80 | opcode, 0x80 | 126, length >> 8, length & 0xff])
          : Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 127]), bigEndian64(length)]);
    const masked = Buffer.from(payload.map((b, i) => b ^ (mask[i % 4] as number)));
    if (!this.socket.destroyed) this.socket.write(Buffer.concat([header, mask, masked]));
  }

  private async frame(): Promise<{ final: boolean; opcode: number; payload: Buffer }> {
    const [first = 0, second = 0] = await this.readExactly(2);
    let length = second & 0x7f;
    if (length === 126) length = (await this.readExactly(2)).readUInt16BE();
    else if (length === 127) length = Number((await this.readExactly(8)).readBigUInt64BE());
    const mask = second & 0x80 ? await this.readExactly(4) : undefined;
    let payload = await this.readExactly(length);
    if (mask) payload = Buffer.from(payload.map((b, i) => b ^ (mask[i % 4] as number)));
    return { final: (first & 0x80) !== 0, opcode: first & 0x0f, payload };
  }

  /** The next text message; {@link StreamClosed} when the server closes. */
  async receive(): Promise<string> {
    const parts: Buffer[] = [];
    for (;;) {
      const { final, opcode, payload } = await this.frame();
      if (opcode === PING) {
        this.send(PONG, payload);
        continue;
      }
      if (opcode === PONG) continue;
      if (opcode === CLOSE) {
        const code = payload.length >= 2 ? payload.readUInt16BE() : 1005;
        this.send(CLOSE, payload.subarray(0, 2));
        throw new StreamClosed(code, payload.subarray(2).toString());
      }
      if (opcode !== TEXT && opcode !== 0) continue;
      parts.push(payload);
      if (final) return Buffer.concat(parts).toString("utf8");
    }
  }

  /** Closes with 1000 and drops the connection. */
  close(): void {
    const normal = Buffer.alloc(2);
    normal.writeUInt16BE(1000);
    this.send(CLOSE, normal);
    this.socket.destroy();
  }
}

function bigEndian64(n: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigUInt64BE(BigInt(n));
  return out;
}

/** How {@link follow} connects, and how long it keeps trying after a break. */
export interface FollowOptions {
  sinceSeq?: number;
  /** Milliseconds of failed connection attempts before giving up (30 s). */
  retryForMs?: number;
  /** Waits between attempts (injectable for tests). */
  sleep?: (ms: number) => Promise<void>;
}

/**
 * A session's events from `sinceSeq` on, each once and in order, reconnecting after a broken
 * connection (or a close in {@link RESUMABLE}) with `since_seq` one past the last event
 * yielded; ends after `session.ended` (a 1000 close).
 */
export async function* follow(
  connect: (nextSeq: number) => Promise<WebSocketClient>,
  options: FollowOptions = {},
): AsyncGenerator<TraceEvent, void, undefined> {
  let nextSeq = options.sinceSeq ?? 0;
  const retryForMs = options.retryForMs ?? 30_000;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  let failingSince: number | undefined;
  for (;;) {
    let socket: WebSocketClient;
    try {
      socket = await connect(nextSeq);
    } catch (error) {
      if (!(error instanceof ConnectionLost)) throw error;
      const now = Date.now();
      failingSince ??= now;
      if (now - failingSince > retryForMs) throw error;
      await sleep(200);
      continue;
    }
    failingSince = undefined;
    try {
      for (;;) {
        const event = readEvent(await socket.receive());
        if (event.sequence < nextSeq) continue;
        nextSeq = event.sequence + 1;
        yield event;
      }
    } catch (error) {
      if (error instanceof StreamClosed) {
        if (error.code === 1000) return;
        if (!RESUMABLE.has(error.code)) throw error;
      } else if (!(error instanceof ConnectionLost)) {
        throw error;
      }
    } finally {
      socket.close();
    }
  }
}
