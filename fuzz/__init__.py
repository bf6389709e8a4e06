"""picpac's robustness harness: fuzz targets, their seeds and mutators, and the runners (docs/reliability.md).

``fuzz/targets.py`` has one target per input kind (a picpac file, raw and CRC-valid crafted; images;
annotation JSON; stream configs; each foreign store); ``fuzz/harness.py`` runs their cases in worker
processes that may crash; ``fuzz/run.py`` is the command line for long runs by hand, and
``fuzz/atheris_run.py`` the coverage-guided one. The bounded CI part is in ``tests/*/test_*_fuzz.py``.
"""
