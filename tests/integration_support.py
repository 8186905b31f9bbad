"""What the tests of the framework integrations (``roost.integrations.langgraph``, ``.openai_agents``)
share: a quick reconnect pace, a killed server served again, a token-protected server, and the check
that ``import roost`` leaves the framework out."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from roost.client import Backoff
from roost.transport.tokens import TokenSigner
from tests.support import ROOT, ServerProcess

#: Reconnects paced for tests: a dropped connection is tried again within 0.2 s.
FAST = Backoff(base=0.05, cap=0.2)
#: The secret of :func:`token_server`'s tokens.
SECRET = "s" * 40


def restarted(server: ServerProcess, *args: str) -> ServerProcess:
    """``server``'s data directory, app and environment served again on its port, after it was killed."""
    port = server.addr.rsplit(":", 1)[1]
    return ServerProcess(server.data_dir, "--port", port, *args, app=server.app, env=server.env).start()


@contextmanager
def token_server(data_dir: Path, app: str) -> Iterator[tuple[ServerProcess, str]]:
    """A ``roost serve`` of ``app`` that needs a token (``ROOST_SECRET``), and a token for ``alice``;
    killed at the end."""
    token = TokenSigner(SECRET).issue("alice", ttl=600)
    server = ServerProcess(data_dir, app=app, env={"ROOST_SECRET": SECRET}).start()
    try:
        yield server, token
    finally:
        server.kill()


def check_import_is_lazy(integration: str, framework: str) -> None:
    """``import roost`` (its client, transport, agent runtime and integrations package) imports no
    ``framework``; importing ``roost.integrations.{integration}`` does."""
    code = (
        "import sys, roost, roost.client, roost.transport, roost.agent, roost.integrations\n"
        f"assert {framework!r} not in sys.modules, '{framework} was imported'\n"
        f"import roost.integrations.{integration}\n"
        f"assert {framework!r} in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
