"""NumPy functional engine: tiled attention algorithms that emit the operation trace."""

from vfasim.functional.engine import engine_trace, run_engine
from vfasim.functional.policy import ALGORITHMS, Policy, policy_for
from vfasim.functional.precision import Precision
from vfasim.functional.reference import reference_attention
from vfasim.functional.results import ROW_FLAGS, EngineResult, RowDiagnostics
from vfasim.functional.tiling import Tiling

__all__ = ["ALGORITHMS", "ROW_FLAGS", "EngineResult", "Policy", "Precision", "RowDiagnostics", "Tiling", "engine_trace",
           "policy_for", "reference_attention", "run_engine"]
