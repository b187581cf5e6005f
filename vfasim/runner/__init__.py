"""The run pipeline: inputs checked once, the run spec, preparation, one core or a whole chip, the result.

``api.run`` (the package's front, ``vfasim.run``) is the way in. ``plan`` is the one path from inputs
to a run, taken by it and by ``run_configs``, sweeps and sensitivity: ``inputs``, ``rules``,
``options`` and ``applies`` check and normalise the keywords into one ``spec.RunInputs``, built and
checked once, which the one-core and the chip path take; ``spec`` also records what decides a
result; ``prepare`` builds the workload and runs the engine; ``chip_run`` takes a run to a whole
chip; ``row`` flattens a result.
(The package is not called ``run``: a subpackage of that name would replace the function
``vfasim.run`` as the package's attribute once imported.)
"""
