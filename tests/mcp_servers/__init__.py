"""MCP servers for the MCP client's tests, written with the SDK's server API (``MCPServer``), each
run as a subprocess: ``python -m tests.mcp_servers.tools stdio`` or ``... http PORT [--expire]``."""
