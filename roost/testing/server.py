"""An app served on a real socket in the test's own event loop.

::

    async with serve(create_app([Counter], data_dir=tmp_path)) as addr:     # "127.0.0.1:PORT"
        async with connect(f"ws://{addr}/agents/counter/c1") as ws: ...
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from starlette.types import ASGIApp

from roost.testing.waiting import until
from roost.transport import uvicorn_protocols

__all__ = ["serve"]


async def _run(server: uvicorn.Server) -> None:
    try:
        await server.serve()
    except SystemExit as exc:  # uvicorn exits the process when start-up fails; here the test fails
        raise RuntimeError(f"the server stopped before it started (exit code {exc.code})") from None


@contextlib.asynccontextmanager
async def serve(app: ASGIApp, *, log_level: str = "warning", ws: str | None = None) -> AsyncIterator[str]:
    """Serve ``app`` (a Roost app, or any ASGI app that mounts one) on ``127.0.0.1`` and an ephemeral
    port, with the WebSocket protocol ``roost serve`` uses (or uvicorn's ``ws`` setting given, e.g.
    ``"websockets-sansio"``, uvicorn's own); yields ``host:port``.

    Guarantees: the server is accepting connections before the block runs (a start-up error is raised
    here, not later); on exit it shuts down through the app's lifespan (its actors stop and their files
    close) and is waited for, at most 15 s.
    """
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        ws=ws or uvicorn_protocols.choose().ws,
        ws_per_message_deflate=False,
        lifespan="on",
        log_level=log_level,
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(_run(server))
    try:
        await until(lambda: server.started or task.done(), timeout=10, interval=0.01)
        if task.done():
            task.result()
            raise RuntimeError("the server stopped before it started")
    except BaseException:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 15)
        raise
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
