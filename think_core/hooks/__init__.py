"""The plugin system: the hook specifications, loading plugins, and calling their hooks (async-correct, time-limited, traced)."""
