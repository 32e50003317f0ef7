"""The service every edge receives: the typed operations, the runtime that owns a process's
resources (pools, generations, reload, the writer), settings, keys and the tool definitions."""
