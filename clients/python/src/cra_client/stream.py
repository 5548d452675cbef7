"""Live TRACE streams (``GET /v1/traces/stream``, ``specs/http.md``) over a WebSocket client of
our own (RFC 6455, standard library only), with automatic resume.

A session's stream replays its chain from ``since_seq`` and then sends live events, one per text
message, each once and in order; it closes with 1000 after ``session.ended``. When the
connection breaks (the server restarted, the network dropped it, or it closed the socket as a
slow consumer, 4008), :func:`follow` connects again with ``since_seq`` one past the last event
it yielded, so the caller sees every event exactly once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from .errors import CraError

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: Closes after which a stream resumes: the server going away (1001, a restart or a missed
#: ping), an abnormal or internal end (1006, 1011, 1012, 1013), a slow consumer (4008), events
#: of other replicas possibly missed (4009).
RESUMABLE = frozenset({1001, 1006, 1011, 1012, 1013, 4008, 4009})
_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA


def accept_for(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server answers to ``key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


class StreamClosed(Exception):
    """The server closed the stream on purpose (``code``, ``reason``)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"stream closed: {code} {reason}")
        self.code = code
        self.reason = reason


class WebSocket:
    """One client connection: text messages in, pings answered, closes reported."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        secure = parts.scheme in ("https", "wss")
        host = parts.hostname or "localhost"
        port = parts.port or (443 if secure else 80)
        raw = socket.create_connection((host, port), timeout=timeout)
        if secure:
            raw = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
        self.sock = raw
        self.buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        status_line, *lines = head.split("\r\n")
        status = int(status_line.split(" ")[1])
        if status != 101:
            body = self._body_after(lines)
            raise CraError.from_body(status, body)
        accept = accept_for(key)
        headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines)}
        if headers.get("sec-websocket-accept") != accept:
            raise CraError(0, "unexpected_answer", "the server's WebSocket handshake did not match")

    def _body_after(self, lines: list[str]) -> Any:
        length = 0
        for line in lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        raw = self._read_exactly(length) if length else b""
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            self._fill()
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _frame(self) -> tuple[bool, int, bytes]:
        first, second = self._read_exactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exactly(8))
        mask = self._read_exactly(4) if second & 0x80 else b""
        payload = self._read_exactly(length)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(first & 0x80), first & 0x0F, payload

    def receive(self) -> str:
        """The next text message; :class:`StreamClosed` when the server closes."""
        message = b""
        while True:
            final, opcode, payload = self._frame()
            if opcode == _PING:
                self._send(_PONG, payload)
                continue
            if opcode == _PONG:
                continue
            if opcode == _CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    self._send(_CLOSE, payload[:2])
                except OSError:
                    pass
                raise StreamClosed(code, payload[2:].decode(errors="replace"))
            message += payload
            if final:
                return message.decode()

    def close(self) -> None:
        try:
            self._send(_CLOSE, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()


def stream_url(base: str, query: dict[str, str]) -> str:
    """The stream route of the server at ``base`` with ``query``."""
    return f"{base}/v1/traces/stream?{urllib.parse.urlencode(query)}"


def follow(
    connect: Callable[[int], WebSocket],
    *,
    since_seq: int = 0,
    retry_for: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """Yields a session's events from ``since_seq`` on, each once, reconnecting after a broken
    connection (or a close in :data:`RESUMABLE`) with ``since_seq`` one past the last event
    yielded, for up to ``retry_for`` seconds of failed attempts; ends after ``session.ended``.
    """
    next_seq = since_seq
    failing_since: float | None = None
    while True:
        try:
            socket_ = connect(next_seq)
        except (OSError, ConnectionError):
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > retry_for:
                raise
            sleep(0.2)
            continue
        failing_since = None
        try:
            while True:
                event: dict[str, Any] = json.loads(socket_.receive())
                if event.get("sequence", -1) < next_seq:
                    continue
                next_seq = int(event["sequence"]) + 1
                yield event
        except StreamClosed as closed:
            if closed.code == 1000:
                return
            if closed.code not in RESUMABLE:
                raise
        except (OSError, ConnectionError):
            pass
        finally:
            socket_.close()
