"""A plugin module whose import is interrupted (Ctrl-C while loading): that must still stop."""

raise KeyboardInterrupt
