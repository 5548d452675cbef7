"""The one error a cra server answers, as an exception.

Every refusal carries the body of ``specs/errors.md``: a token (``forbidden``,
``invalid_request``, ...), a message for people and, when the input was at fault, the JSON
pointer of each bad field. :class:`CraError` keeps all three, and the HTTP status.
"""

from __future__ import annotations

from typing import Any


class CraError(Exception):
    """A refusal from the server (or a transport failure, with token ``unavailable``)."""

    def __init__(
        self,
        status: int,
        token: str,
        message: str,
        pointers: list[str] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {token}: {message}")
        self.status = status
        self.token = token
        self.message = message
        self.pointers = pointers or []
        self.body = body

    @property
    def pointer(self) -> str | None:
        """The first bad field's JSON pointer, if the input was at fault."""
        return self.pointers[0] if self.pointers else None

    @classmethod
    def from_body(cls, status: int, body: Any) -> CraError:
        """Reads an error body; a body of another shape keeps its text as the message."""
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            details = body.get("details") or {}
            errors = details.get("errors", []) if isinstance(details, dict) else []
            pointers = [
                e["pointer"]
                for e in errors
                if isinstance(e, dict) and isinstance(e.get("pointer"), str)
            ]
            return cls(status, body["error"], str(body.get("message", "")), pointers, body)
        return cls(status, "unexpected_answer", f"an answer without an error body: {body!r}")
