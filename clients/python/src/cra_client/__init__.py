"""cra_client: a Python client of cra, the governed-context runtime for AI agents.

>>> from cra_client import Client, verify_chain
>>> cra = Client("http://127.0.0.1:8421", token, agent_id="admin")
>>> session = cra.open_session("say hello")
>>> resolution = cra.resolve(session["session_id"], "say hello")
>>> cra.execute(session["session_id"], resolution["resolution_id"], "example.echo",
...             {"message": "hello"})["status"]
'success'
>>> verify_chain(cra.trace(session["session_id"])) is None
True
"""

from .aio import AsyncClient
from .chain import Finding, event_hash, read_jsonl, verify_chain
from .client import Client
from .errors import CraError

__all__ = [
    "AsyncClient",
    "Client",
    "CraError",
    "Finding",
    "event_hash",
    "read_jsonl",
    "verify_chain",
]
