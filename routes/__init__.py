"""The edges: CLI, HTTP app, auth, MCP server and tool schemas. The only code reading env/config."""
