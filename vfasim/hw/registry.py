"""Finding and loading hardware configs: built-in names or YAML paths, parsed safely.

A config may start from another with ``base: NAME`` and override fields; the
override is a deep merge (mappings merge, a null removes an inherited mapping,
everything else replaces).
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from vfasim.errors import VfasimError

if TYPE_CHECKING:  # pydantic loads with the first config, not for the list of names
    from pydantic import ValidationError

    from vfasim.hw.config import HardwareConfig

MAX_BASE_DEPTH = 8
MAX_YAML_BYTES = 2**20  # a config or kernel description is a few KB; anything larger is not one


def builtin_names() -> list[str]:
    """Names of the configs shipped in hw_configs/, sorted."""
    return sorted(_builtin_files())


def _builtin_files() -> dict[str, Any]:
    root = resources.files("vfasim").joinpath("hw_configs")
    files = [f for f in root.iterdir() if f.name.endswith(".yaml")]
    return {_config_name(f.read_text(), f.name): f for f in files}


@lru_cache(maxsize=256)
def _config_name(text: str, file_name: str) -> str:
    """The name a built-in file's text gives its config, parsed once per text (an edited file is parsed anew)."""
    return read_yaml(text, file_name).get("name", file_name[:-5])


def load_hw(name_or_path: str | Path | HardwareConfig) -> HardwareConfig:
    """A built-in config by name (case-insensitive) or a YAML file by path; a config object is validated again
    (``model_copy(update=...)`` skips validation, so a copy could hold a negative clock)."""
    from pydantic import ValidationError

    from vfasim.hw.config import HardwareConfig

    if isinstance(name_or_path, HardwareConfig):
        try:
            return HardwareConfig.model_validate(name_or_path.model_dump(warnings=False))
        except ValidationError as exc:
            raise VfasimError(f"hw config {name_or_path.name}: {first_error(exc)}") from None
    raw, origin = _raw(str(name_or_path), chain=())
    try:
        return HardwareConfig.model_validate(raw)
    except ValidationError as exc:
        raise VfasimError(f"hw config {origin}: {first_error(exc)}") from None


def variant(config: HardwareConfig, changes: dict, what: str = "") -> HardwareConfig:
    """``config`` with ``changes`` deep-merged into it (``deep_merge``, as a YAML file's ``base:`` is), validated: the
    one way a config is varied; a one-line error names the field (``what`` says which change it was)."""
    from pydantic import ValidationError

    from vfasim.hw.config import HardwareConfig

    try:
        return HardwareConfig.model_validate(deep_merge(config.model_dump(warnings=False), changes))
    except ValidationError as exc:
        raise VfasimError(f"hw config {config.name}{' with ' + what if what else ''}: {first_error(exc)}") from None


def _raw(name_or_path: str, chain: tuple[str, ...], folder: Path | None = None) -> tuple[dict, str]:
    """The merged document of a config and its ``base`` chain; a relative base path is read from
    the folder of the YAML file that names it."""
    text, origin, key = _source(name_or_path, folder)
    if key in chain:
        cycle = " -> ".join(k.split(":", 1)[1] for k in (*chain[chain.index(key):], key))
        raise VfasimError(f"hw config {origin}: 'base' chain is a cycle ({cycle})")
    if len(chain) > MAX_BASE_DEPTH:
        raise VfasimError(f"hw config {name_or_path}: 'base' chain deeper than {MAX_BASE_DEPTH}")
    raw = read_yaml(text, origin)
    base = raw.pop("base", None)
    if base is None:
        return raw, origin
    if not isinstance(base, str):
        raise VfasimError(f"hw config {origin}: base must be a config name or path")
    here = Path(origin).parent if key.startswith("file:") else None
    parent, _ = _raw(base, (*chain, key), here)
    return deep_merge(parent, raw), origin


def _source(name_or_path: str, folder: Path | None = None) -> tuple[str, str, str]:
    """(text, name to report, identity for cycle checks) of a built-in name or a YAML path."""
    builtins = {k.lower(): v for k, v in _builtin_files().items()}
    if name_or_path.lower() in builtins:
        return builtins[name_or_path.lower()].read_text(), name_or_path, f"builtin:{name_or_path.lower()}"
    path = Path(name_or_path)
    if folder is not None and not path.is_absolute():
        path = folder / path
    if path.suffix in (".yaml", ".yml") or path.exists():
        return read_text_file(path, "hw config"), str(path), f"file:{path.resolve()}"
    raise VfasimError(f"unknown hw config {name_or_path!r} (built-in: {', '.join(builtin_names())}; "
                      "or give a path to a .yaml file)")


def read_text_file(path: Path, what: str, expected: str = "a YAML file") -> str:
    """A YAML (or ``expected``) file's text; a one-line error for a directory, a device or pipe (which could block
    or never end), a file over ``MAX_YAML_BYTES``, an unreadable or a non-UTF-8 file."""
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file" if path.exists() else "no such file"
        raise VfasimError(f"{what} {path}: {kind}, not {expected}")
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise VfasimError(f"{what} {path}: larger than {MAX_YAML_BYTES // 2**20} MiB, not {expected}")
        return path.read_text()
    except OSError as exc:
        raise VfasimError(f"{what} {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise VfasimError(f"{what} {path}: not a text file (not UTF-8)") from None


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # libyaml when present
    """The safe loader, refusing a mapping that gives one key twice (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` and the keys that override it are fine
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            if isinstance(key, Hashable):  # an unhashable key is the base loader's to refuse
                seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(text: str, origin: str, what: str = "hw config") -> dict:
    """A YAML mapping parsed safely, each key once; a one-line error naming ``what`` and ``origin`` otherwise."""
    try:
        raw = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        problem = str(getattr(exc, "problem", "") or "")
        detail = f": {problem}" if problem.startswith("duplicate key") else ""
        raise VfasimError(f"{what} {origin}: not valid YAML{line}{detail}") from None
    if not isinstance(raw, dict):
        raise VfasimError(f"{what} {origin}: expected a mapping at the top level")
    return raw


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``: mappings merge, null removes an inherited key, everything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if value is None and isinstance(out.get(key), dict):
            del out[key]
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def first_error(exc: ValidationError) -> str:
    """The first validation error as one line: dotted field path, then what is wrong."""
    err = exc.errors()[0]
    path = ".".join(str(p) for p in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{path}: {message}" if path else message
