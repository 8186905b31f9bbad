"""The settings of the MCP client: the servers an agent uses and how their sessions are kept.

::

    [agent.mcp_servers.files]          # a server started as a subprocess, spoken to over stdio
    command = "python"
    args = ["-m", "my_files_server"]
    approval_mode = "confirm_once"     # of every tool of this server (default: safe_readonly)
    tool_approval = { delete = "mutating" }
    keywords = { read = ["read", "open"] }   # for the deterministic planner (default: the tool's name)

    [agent.mcp_servers.search]         # a server over streamable HTTP
    url = "http://127.0.0.1:8000/mcp"
    session_ttl_s = 600                # a session unused this long is taken as expired
    headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }   # ${NAME}: from the environment

    [agent.capability_sessions]
    track_session_ids = true           # record the server's session id (resume_token)
    emit_progress_events = true        # MCP progress notifications become tool_progress events
    support_reinit_on_expiry = false   # an expired session is re-initialised without asking

The same servers can be given on the agent class (``mcp_servers = (McpServer(name=..., ...),)``).
Unknown keys are refused, as everywhere in ``roost.toml``. This module does not import the SDK.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from roost.agent.catalog import ApprovalMode

__all__ = ["MAX_SERVER_NAME", "CapabilitySessions", "McpServer", "mcp_tool_name", "server_of"]

MAX_SERVER_NAME = 40
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpServer(BaseModel):
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), never both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    #: HTTP headers of every request to a ``url`` server (``Authorization`` for a server that wants a
    #: token). A value may name environment variables, ``${NAME}``, read when a connection opens, so
    #: that ``roost.toml`` need not hold the secret. Never logged, never in events or rows.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    approval_mode: ApprovalMode = "safe_readonly"
    tool_approval: dict[str, ApprovalMode] = Field(default_factory=dict)
    keywords: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    session_ttl_s: float | None = Field(None, gt=0)
    call_timeout_s: float = Field(60.0, gt=0)
    connect_timeout_s: float = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either command (stdio) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must be http:// or https://")
        if self.headers and self.url is None:
            raise ValueError("headers are for a url (streamable HTTP) server")
        return self

    def http_headers(self) -> dict[str, str]:
        """:attr:`headers` with their ``${NAME}`` read from the environment; a variable that is not
        set is a ``ConnectionError`` naming it (and the header), never showing a value."""
        made: dict[str, str] = {}
        for header, secret in self.headers.items():

            def value_of(found: re.Match[str], header: str = header) -> str:
                name = found.group(1)
                if name not in os.environ:
                    raise ConnectionError(
                        f"MCP server {self.name!r}: header {header!r} names ${{{name}}}, which is not set"
                    )
                return os.environ[name]

            made[header] = _VARIABLE.sub(value_of, secret.get_secret_value())
        return made

    def named(self, name: str) -> McpServer:
        """This server under ``name`` (its table's name in ``roost.toml``), checked."""
        if not _NAME.match(name) or len(name) > MAX_SERVER_NAME or "__" in name:
            raise ValueError(
                f"MCP server name {name!r}: letters, digits, _ and - only (no '__'), "
                f"at most {MAX_SERVER_NAME} characters"
            )
        return self.model_copy(update={"name": name})

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable_http"


class CapabilitySessions(BaseModel):
    """``[agent.capability_sessions]``: the seed's three switches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    track_session_ids: bool = True
    emit_progress_events: bool = True
    support_reinit_on_expiry: bool = False


PREFIX = "mcp__"


def mcp_tool_name(server: str, tool: str) -> str:
    """The catalog name of ``server``'s tool ``tool``: ``mcp__SERVER__TOOL``."""
    return f"{PREFIX}{server}__{tool}"


def server_of(tool_name: str) -> str | None:
    """The server of an MCP tool's catalog name; None for any other tool."""
    if not tool_name.startswith(PREFIX):
        return None
    return tool_name[len(PREFIX) :].split("__", 1)[0]
