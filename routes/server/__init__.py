"""One serving process: the app that composes the HTTP and MCP edges over one runtime, under uvicorn."""
