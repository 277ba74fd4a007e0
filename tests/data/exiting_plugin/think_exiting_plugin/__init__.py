"""Plugins that end the process while they load."""
