"""The MCP edge: Quarry's tools over stdio and Streamable HTTP."""
