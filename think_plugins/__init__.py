"""The plugins bundled with think, each registered under its own entry point in the ``think`` group."""
