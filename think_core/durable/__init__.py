"""Durable submissions: accepted into the store, drained in order, leased, and taken over when their process died."""
