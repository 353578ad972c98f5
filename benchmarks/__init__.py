"""hpengine's benchmarks: the op suite (``ops/``), end-to-end runs (``e2e/``) and analyses of
recorded runs (``analysis/``), run from the repository root with ``python -m benchmarks``
(``__main__.py``); the shared timer, argument grammar and result files are in ``_harness.py``."""
