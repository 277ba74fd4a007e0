"""A plugin whose import fails, as a plugin with a missing dependency would."""

raise RuntimeError("sample_broken cannot be imported")
