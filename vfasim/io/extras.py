"""Optional dependencies: a feature that needs one names the extra that installs it, in one line.

``pip install 'vfasim[parquet]'`` brings pyarrow (a sweep's results.parquet, pandas' Parquet
engine); ``vfasim[dask]`` brings ``dask[distributed]`` (``vfasim sweep --executor dask``);
``vfasim[capture]`` brings torch (``experiments/workload_stats/capture.py``).
"""

from __future__ import annotations

import importlib.util

from vfasim.errors import VfasimError

#: extra -> the module it provides
EXTRAS = {"parquet": "pyarrow", "dask": "distributed", "capture": "torch"}


def has(extra: str) -> bool:
    """Whether the module of ``extra`` can be imported."""
    return importlib.util.find_spec(EXTRAS[extra]) is not None


def hint(extra: str, feature: str) -> str:
    """One line: what ``feature`` needs and how to install it."""
    return f"{feature} needs the {extra} extra ({EXTRAS[extra]}): pip install 'vfasim[{extra}]'"


def need(extra: str, feature: str) -> None:
    """Refuse ``feature`` in one line when its extra is missing."""
    if not has(extra):
        raise VfasimError(hint(extra, feature))
