"""One turn: its steps (model stream, tool calls, approvals), the answer it builds, its input (intake) and its record (journal)."""
