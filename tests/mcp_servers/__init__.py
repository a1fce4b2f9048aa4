"""MCP servers of the interop tests (tests/test_mcp_client.py): the official SDK's FastMCP."""
