"""The echo ceilings, each run as its own process: ``python -m bench.echo_servers KIND --port P``.

- ``starlette``: a Starlette app with one WebSocket route echoing text frames, served by uvicorn with
  exactly the settings of ``roost serve`` (see ``roost/cli/``): uvloop, httptools,
  ``ws=websockets-sansio``, per-message deflate off, 1 MiB frame limit, lifespan on, no access log,
  ``WEBSOCKETS_MAX_LINE_LENGTH`` raised. It is "our stack doing no work".
- ``raw``: the ``websockets`` library's own asyncio server on uvloop (compression off), the library
  floor.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", "32768")  # as roost.cli, before websockets loads

import uvloop
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["main", "make_starlette_echo"]

MAX_SIZE = 1 << 20


async def _echo(ws: WebSocket) -> None:
    await ws.accept()
    try:
        while True:
            await ws.send_text(await ws.receive_text())
    except WebSocketDisconnect:
        pass


def make_starlette_echo() -> Starlette:
    return Starlette(routes=[WebSocketRoute("/{path:path}", _echo)])


def serve_starlette(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(
        make_starlette_echo(),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_max_size=MAX_SIZE,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run()


def serve_raw(port: int) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def echo(ws: ServerConnection) -> None:
        async for msg in ws:
            await ws.send(msg)

    async def run() -> None:
        async with serve(echo, "127.0.0.1", port, max_size=MAX_SIZE, compression=None, backlog=4096) as srv:
            await srv.serve_forever()

    uvloop.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.echo_servers")
    ap.add_argument("kind", choices=["starlette", "raw"])
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    if a.kind == "starlette":
        serve_starlette(a.port)
    else:
        serve_raw(a.port)


if __name__ == "__main__":
    main()
