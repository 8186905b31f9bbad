"""The Python client never logs a token: its URL may carry ``?token=roost1.…``, and every line of the
``roost.client`` logger (connection failures, error frames, welcomes, reconnects, closes) names the
URL with the token blanked (:mod:`roost.client.logs`)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from roost.client import Client
from roost.examples.kinds import KINDS
from roost.testing import serve, until
from roost.transport import create_app
from roost.transport.security import token_authenticate
from roost.transport.tokens import TokenSigner

SECRET = "s" * 40


def client_log(caplog: pytest.LogCaptureFixture) -> str:
    """Every line the client logged, as a handler would write it (tracebacks included)."""
    records = [r for r in caplog.records if r.name in ("roost.client", "websockets.client")]
    return "\n".join(f"{r.getMessage()}\n{r.exc_text or ''}" for r in records)


async def test_no_record_of_the_client_logger_holds_a_token(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="roost.client")
    caplog.set_level(logging.DEBUG, logger="websockets.client")  # its DEBUG lines hold the request line
    signer = TokenSigner(SECRET)
    good = signer.issue("ann", ttl=600)
    forged = TokenSigner("f" * 40).issue("ann", ttl=600)
    app = create_app(KINDS, data_dir=data_dir, authenticate=token_authenticate(signer))
    async with serve(app) as addr:
        async with Client(f"ws://{addr}/agents/counter/c1?token={forged}") as refused:
            await until(lambda: refused.closed_reason is not None)  # an error frame, then 4401
        async with Client(f"ws://{addr}/agents/counter/c1?x=1&token={good}") as c:
            await c.wait_connected()
            assert await c.call("increment") == 1
            assert c.drop()
            await until(lambda: c.reconnects >= 1 and c.connected)
    with socket.socket() as unused:  # bound, not listening: a connection is refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        async with Client(f"ws://127.0.0.1:{port}/agents/counter/c1?token={good}") as failing:
            await until(lambda: "connection failed" in client_log(caplog))
            assert not failing.connected
    text = client_log(caplog)
    for said in (
        "error frame unauthenticated",
        "stopping",
        "welcome",
        "connection failed",
        "reconnecting",
        "> GET",
    ):
        assert said in text, said
    assert text.count("?x=1&token=[redacted]") >= 2  # the URL is still named, without its token
    for token in (good, forged):
        assert token not in text
        assert token.split(".")[2] not in text  # not even the signature
    assert "roost1." not in text
