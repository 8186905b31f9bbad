"""Tokens never reach the log, however the URL encodes them, and a malformed token is a 401, never a 500.

Guarantees (``docs/security.md``, *Tokens*):

- **The token parameter is found by its decoded name.** ``?tok%65n=…`` is the ``token`` parameter for
  the query parser, so it is also the one taken out of the URL before anything logs it.
- **The log filter works on decoded text.** A token whose ``.`` arrive as ``%2E`` (or any other
  percent-encoding of it) is blanked in every log line, uvicorn's request lines included.
- **Token verification raises only ``TokenError``**, whatever the string: a non-ASCII signature is
  refused as malformed (401 over HTTP, 4401 over a WebSocket), not an HTTP 500.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from roost.testing import connect, until
from roost.transport.security import RedactTokens
from roost.transport.tokens import TokenError, TokenSigner
from tests.support import ServerProcess

SECRET = "k" * 40
signer = TokenSigner(SECRET)


def _encodings(token: str) -> dict[str, str]:
    """The query strings that carry ``token`` under the parameter ``token``, spelled many ways."""
    dots = token.replace(".", "%2E")
    every = "".join(f"%{b:02X}" for b in token.encode())
    return {
        "plain": f"token={token}",
        "name %65": f"tok%65n={token}",
        "name %74, dots %2e": f"%74oken={token.replace('.', '%2e')}",
        "dots %2E": f"token={dots}",
        "dots %2e": f"token={token.replace('.', '%2e')}",
        "every byte": f"%74%6F%6B%65%6E={every}",
        "after another": f"x=1&tok%65n={dots}",
    }


async def _close_code(url: str) -> int | None:
    async with connect(url) as ws:
        frames, code = await ws.read_until_closed(timeout=10)
    assert len(frames) <= 2, frames  # an error frame, then the close
    return code


def test_a_token_whose_signature_is_not_ascii_is_refused_as_malformed() -> None:
    good = signer.issue("alice", ttl=60)
    body, _, _ = good.rpartition(".")
    for bad in (f"{body}.é", f"{body}.\u2603\u2603", "roost1.ü.abc"):
        with pytest.raises(TokenError):
            signer.verify(bad)


@pytest.mark.parametrize(
    "line",
    [
        "GET /agents/counter/c?token=roost1%2Eabc%2Edef HTTP/1.1",
        "GET /agents/counter/c?x=roost1%2eabc%2edef",
        "%72oost1.abc.def",
    ],
)
def test_the_log_filter_blanks_a_percent_encoded_token(line: str) -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, line, None, None)
    RedactTokens().filter(record)
    text = record.getMessage()
    assert "abc" not in text, text
    assert "def" not in text, text
    assert "[redacted]" in text


def test_the_log_filter_blanks_an_identity_providers_jwt() -> None:
    """A JWT quoted anywhere in a log line (not only in ``?token=``) is blanked whole."""
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbm4ifQ.c2lnbmF0dXJlLXBhcnQ"
    for line in (f"refused: {jwt} was bad", f"Authorization: Bearer {jwt}", "x=" + jwt.replace(".", "%2E")):
        record = logging.LogRecord("roost", logging.INFO, __file__, 1, line, None, None)
        RedactTokens().filter(record)
        text = record.getMessage()
        assert "c2lnbmF0dXJl" not in text, text
        assert "eyJzdWIi" not in text, text
    plain = logging.LogRecord("roost", logging.INFO, __file__, 1, "eyJ alone is no token", None, None)
    RedactTokens().filter(plain)
    assert plain.getMessage() == "eyJ alone is no token"


@pytest.mark.slow
async def test_no_encoding_of_the_token_parameter_reaches_the_log_and_each_is_accepted(
    data_dir: Path,
) -> None:
    tokens = {name: signer.issue(f"user{i}", ttl=600) for i, name in enumerate(_encodings("x"))}
    server = ServerProcess(data_dir, env={"ROOST_SECRET": SECRET}).start()
    try:
        async with httpx.AsyncClient() as http:
            for name, token in tokens.items():
                query = _encodings(token)[name]
                url = f"{server.ws}/agents/counter/c?{query}"
                async with connect(url) as ws:  # accepted: the server found the token
                    assert (await ws.recv(timeout=10))["type"] == "welcome", name
                r = await http.get(f"{server.http}/agents/counter/c?{query}")
                assert r.status_code == 200, (name, r.text)
            # a non-ASCII signature, over every way in: 401 / 4401, and the server goes on
            body = tokens["plain"].rpartition(".")[0]
            bad = f"{body}.%C3%A9"
            r = await http.get(f"{server.http}/agents/counter/c?token={bad}")
            assert r.status_code == 401, r.text
            r = await http.post(
                f"{server.http}/agents/counter/c/rpc/get",
                json=[],
                headers={b"Authorization": f"Bearer {body}.".encode() + "é".encode()},
            )
            assert r.status_code == 401, r.text
            assert await _close_code(f"{server.ws}/agents/counter/c?token={bad}") == 4401
            r = await http.get(f"{server.http}/healthz")
            assert r.status_code == 200
        # bounded: the last request line is written by the server process
        await until(
            lambda: sum("[accepted]" in line for line in server.log) >= len(tokens),
            timeout=5,
            interval=0.05,
            message="uvicorn logged a request line for every accepted connection",
        )
    finally:
        server.kill()
    text = "".join(server.log)
    assert "[accepted]" in text
    assert "Traceback" not in text
    assert "Exception in ASGI application" not in text
    for token in tokens.values():
        _, claims, sig = token.split(".")
        for piece in (claims, sig):
            assert piece not in text
            assert quote(piece) not in text
