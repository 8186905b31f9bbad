"""An agent kind's MCP servers (its class's and its ``roost.toml``'s) and their tools in its catalog.

This module does not import the MCP SDK: a kind without MCP servers never loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from roost.agent.catalog import Tool
from roost.agent.config import AgentConfig, ConfigError
from roost.agent.mcp_config import McpServer

__all__ = ["listed_tools", "servers"]

log = logging.getLogger("roost.agent.mcp")


def servers(declared: Sequence[McpServer], config: AgentConfig, source: str | Path | None) -> list[McpServer]:
    """The class's servers, then ``[agent.mcp_servers.NAME]``'s; a name given twice, or not allowed,
    is a :class:`ConfigError`."""
    where = source or "roost.toml"
    found: dict[str, McpServer] = {}
    try:
        named = [s.named(s.name) for s in declared]
        named += [s.named(name) for name, s in config.mcp_servers.items()]
    except ValueError as exc:
        raise ConfigError(f"{where}: [agent.mcp_servers]: {exc}") from None
    for server in named:
        if server.name in found:
            raise ConfigError(f"{where}: [agent.mcp_servers.{server.name}]: two MCP servers of that name")
        found[server.name] = server
    return list(found.values())


def listed_tools(
    servers: Sequence[McpServer],
    source: str | Path | None,
    owner: str = "",
    config: AgentConfig | None = None,
) -> list[Tool]:
    """The catalog tools of every server, each asked for its tools now. **A server that cannot be
    asked does not stop the others, or the kind**: it is logged as an error naming it and where it
    was declared (``owner``'s ``mcp_servers`` or ``roost.toml``), with the command a stdio server was
    started with, and its tools are not in the catalog (until the kind is registered again: the next
    start)."""
    if not servers:
        return []
    from roost.agent.mcp_client import discover
    from roost.agent.mcp_tools import tools_of

    made: list[Tool] = []
    for server in servers:
        try:
            made.extend(tools_of(server, discover(server)))
        except ConnectionError as exc:
            if (config is not None and server.name in config.mcp_servers) or not owner:
                where = f"{source or 'roost.toml'}: [agent.mcp_servers.{server.name}]"
            else:
                where = f"{owner}.mcp_servers, server {server.name!r}"
            if server.command is not None:
                started = " ".join([server.command, *server.args])
                exc = ConnectionError(f"{exc} (started as: {started}, in {server.cwd or Path.cwd()})")
            log.error("%s: %s; its tools are not in the catalog until the next start", where, exc)
    return made
