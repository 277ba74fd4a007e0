"""Sample think plugins used by the test suite (never installed outside a temporary directory)."""
