"""GPU measurement harness for vfasim's validation (runs on a bare CUDA machine; no vfasim import).

``harness.rows`` (schemas, CSV/YAML writers) needs only the standard library; everything else
needs torch and triton.
"""
