"""Where each number of a config comes from: the comment beside it in its YAML file.

Every number in ``hw_configs/*.yaml`` says its source in a trailing comment (a paper line, a
datasheet, "assumed, because …", "fitted to …"). YAML loaders drop comments, so this reads them
off the text: a line ``key: value  # source`` gives the dotted path of ``key`` (from the
indentation of the lines above) and its comment. A config's ``base`` chain is read too; a
value a file sets replaces its base's comment with its own (or with none).

Assumptions:
- Block-style YAML, one key per line, as the shipped configs are written; flow mappings and
  multi-line values give no comments (their values still show).
- A ``#`` inside a quoted value is not a comment.
"""

from __future__ import annotations

import re
from pathlib import Path

from vfasim.hw.registry import MAX_BASE_DEPTH, _source, read_yaml

_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.+-]+):(.*)$")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def hw_sources(name_or_path: str | Path, folder: Path | None = None, depth: int = 0) -> dict[str, str]:
    """Dotted path -> the source comment of a config's keys, its base chain's included ("" where none)."""
    text, origin, key = _source(str(name_or_path), folder)
    base = read_yaml(text, origin).get("base")
    here = Path(origin).parent if key.startswith("file:") else None
    inherited = hw_sources(base, here, depth + 1) if isinstance(base, str) and depth < MAX_BASE_DEPTH else {}
    return {**inherited, **yaml_comments(text)}


def yaml_comments(text: str) -> dict[str, str]:
    """Dotted path -> trailing comment ("" for none) of every ``key:`` line of a block-style YAML text."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings the line is inside
    for line in text.splitlines():
        match = _KEY.match(line)
        if match is None:
            continue
        indent, key, rest = len(match[1]), match[2], match[3]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        bare = _QUOTED.sub(lambda m: " " * len(m[0]), rest)
        out[path] = rest[bare.index("#") + 1:].strip() if "#" in bare else ""
        stack.append((indent, key))
    return out
