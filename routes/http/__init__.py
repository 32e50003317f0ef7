"""The HTTP edge: the /v1 routers, the console, the API docs, error mapping and metrics."""
