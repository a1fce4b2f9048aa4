"""Totem, a self-hosted AI coding agent."""

__version__ = "0.1.0"
