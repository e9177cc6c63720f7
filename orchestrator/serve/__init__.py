"""The agent surfaces over the exec tool: the `serve` socket server (server) and the MCP server
(mcp_server, mcp_text)."""
