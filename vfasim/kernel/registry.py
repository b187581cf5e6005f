"""Finding and loading kernel descriptions: built-in names (``kernels/*.yaml``) or YAML paths."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vfasim.errors import VfasimError
from vfasim.hw.registry import first_error, read_text_file, read_yaml
from vfasim.kernel.model import Kernel

#: names the chip model used for kernels before they were data; each is a shipped kernel's name
STYLE_ALIASES = ("fa2", "fa3", "fa4")


def builtin_kernel_names() -> list[str]:
    """Names of the kernels shipped in kernels/, sorted."""
    return sorted(_builtin_files())


@functools.cache
def _builtin_files() -> dict[str, Any]:  # the shipped files do not change while a process runs
    root = resources.files("vfasim").joinpath("kernels")
    files = [f for f in root.iterdir() if f.name.endswith(".yaml")]
    return {read_yaml(f.read_text(), f.name, "kernel").get("name", f.name[:-5]): f for f in files}


def load_kernel(name_or_path: str | Path | Kernel) -> Kernel:
    """A built-in kernel by name (case-insensitive) or a YAML file by path; a ``Kernel`` is validated again (a
    ``model_copy(update=...)`` skips validation)."""
    if isinstance(name_or_path, Kernel):
        try:
            return Kernel.model_validate(name_or_path.model_dump(warnings=False))
        except ValidationError as exc:
            raise VfasimError(f"kernel {name_or_path.name}: {first_error(exc)}") from None
    builtin = {k.lower(): k for k in _builtin_files()}.get(str(name_or_path).lower())
    return _builtin(builtin) if builtin is not None else _load(str(name_or_path))


@functools.cache
def _builtin(name: str) -> Kernel:
    return _load(name)


def _load(name_or_path: str) -> Kernel:
    text, origin = _source(name_or_path)
    raw = read_yaml(text, origin, "kernel")
    try:
        return Kernel.model_validate(raw)
    except ValidationError as exc:
        raise VfasimError(f"kernel {origin}: {first_error(exc)}") from None


def _source(name_or_path: str) -> tuple[str, str]:
    builtins = {k.lower(): v for k, v in _builtin_files().items()}
    if name_or_path.lower() in builtins:
        return builtins[name_or_path.lower()].read_text(), name_or_path
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return read_text_file(path, "kernel"), str(path)
    raise VfasimError(f"unknown kernel {name_or_path!r} (built-in: {', '.join(builtin_kernel_names())}; "
                      "or give a path to a .yaml file)")


@functools.cache
def kernels_measured_as() -> dict[str, str]:
    """Validation-table kernel name -> the shipped kernel that predicts its rows (``measured_as``, then ``predicts``)."""
    out: dict[str, str] = {}
    for name in builtin_kernel_names():
        kernel = load_kernel(name)
        for table_name in (*kernel.measured_as, *kernel.predicts):
            if table_name in out:
                raise VfasimError(f"kernels {out[table_name]} and {name} both claim table kernel {table_name!r}")
            out[table_name] = name
    return out


@functools.cache
def kernels_predicted_only() -> frozenset[str]:
    """Validation-table kernel names a shipped kernel predicts without having been built or fitted on them."""
    return frozenset(t for name in builtin_kernel_names() for t in load_kernel(name).predicts)
