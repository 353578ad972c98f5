"""``python -m hpengine.jobs.grag_build`` and its former path ``python -m hpengine.pipeline.grag_build``
(kept for users' scripts) are one front door: same function, same one-line error and exit status."""
import os
import subprocess
import sys

import pytest


def test_the_former_module_is_an_alias():
    from hpengine.jobs.grag_build import main
    from hpengine.pipeline.grag_build import main as former

    assert former is main


@pytest.mark.parametrize("module", ["hpengine.jobs.grag_build", "hpengine.pipeline.grag_build"])
def test_both_paths_run_as_modules(module):
    env = {k: v for k, v in os.environ.items() if k != "HPENGINE_DEBUG"}
    run = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("hpengine: error: grag-build takes the index folder first"), run.stderr
    assert run.stderr.count("\n") == 1
    assert not run.stdout
