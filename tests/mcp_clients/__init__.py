"""MCP clients of the interop tests (tests/test_mcp_sdk.py): the official `mcp` SDK drives Totem."""
