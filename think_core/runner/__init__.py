"""Running a session's turns one at a time: the turn lock, the failure policy (classification, retries, overflow compaction) and the resumable stream of each turn."""
