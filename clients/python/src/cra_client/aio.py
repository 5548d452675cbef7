"""The asynchronous client: :class:`AsyncClient` has every operation of
:class:`~cra_client.Client` as a coroutine (and :meth:`AsyncClient.stream` as an async
iterator), each running the synchronous call on a worker thread (``asyncio.to_thread``), so an
agent's event loop never blocks on the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from .client import Client
from .models import Json

P = ParamSpec("P")
R = TypeVar("R")


def _threaded(
    operation: Callable[Concatenate[Client, P], R],
) -> Callable[Concatenate[AsyncClient, P], Awaitable[R]]:
    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(operation, self.sync, *args, **kwargs)

    run.__doc__ = operation.__doc__
    run.__name__ = operation.__name__
    return run


class AsyncClient:
    """One server, one credential, for asyncio code; the arguments are :class:`Client`'s."""

    def __init__(self, url: str, token: str, **options: Any) -> None:
        self.sync = Client(url, token, **options)

    health = _threaded(Client.health)
    open_session = _threaded(Client.open_session)
    session = _threaded(Client.session)
    end_session = _threaded(Client.end_session)
    resolve = _threaded(Client.resolve)
    execute = _threaded(Client.execute)
    approvals = _threaded(Client.approvals)
    approval = _threaded(Client.approval)
    wait_for_decision = _threaded(Client.wait_for_decision)
    decide = _threaded(Client.decide)
    trace = _threaded(Client.trace)
    create_project = _threaded(Client.create_project)
    deposit = _threaded(Client.deposit)
    pull = _threaded(Client.pull)
    orient = _threaded(Client.orient)
    assert_fact = _threaded(Client.assert_fact)
    facts = _threaded(Client.facts)
    invalidate_fact = _threaded(Client.invalidate_fact)

    async def stream(self, session_id: str, **options: Any) -> AsyncIterator[Json]:
        """:meth:`Client.stream` as an async iterator."""
        events = self.sync.stream(session_id, **options)
        while True:
            event = await asyncio.to_thread(next, events, None)
            if event is None:
                return
            yield event
