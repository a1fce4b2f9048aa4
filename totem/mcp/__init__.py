"""The Model Context Protocol: Totem as a server (server.py)."""
