"""Output: the human table and the JSON document of a run (consumes results, computes nothing)."""

from vfasim.report.text import format_hw, format_kernel, format_run, to_json

__all__ = ["format_hw", "format_kernel", "format_run", "to_json"]
