"""The MCP server of ``bench/mcp_agent.py``: one ``echo`` tool over stdio (the SDK's ``MCPServer``)."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bench")


@mcp.tool()
def echo(text: str) -> str:
    """Answer the text it is given."""
    return text


if __name__ == "__main__":
    mcp.run()
