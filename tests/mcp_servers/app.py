"""An app for tests that run ``roost serve tests.mcp_servers.app:app``: one agent kind, ``mcpagent``,
whose MCP servers come from the ``roost.toml`` given with ``--config``."""

from __future__ import annotations

from roost.agent.agent import Agent
from roost.transport import create_app

__all__ = ["McpAgent", "app"]


class McpAgent(Agent):
    kind = "mcpagent"


app = create_app([McpAgent])
