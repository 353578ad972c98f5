"""``python -m hpengine.jobs.grag_build`` and its former path ``python -m hpengine.pipeline.grag_build``
(kept for users' scripts) are one front door: same function, same one-line error and exit status.
The process-level exit statuses of the front door are tested in tests/pipeline/test_cli_errors.py."""
import runpy
import sys
import warnings

import pytest


def test_the_former_module_is_an_alias():
    from hpengine.jobs.grag_build import main
    from hpengine.pipeline.grag_build import main as former

    assert former is main


@pytest.mark.parametrize("module", ["hpengine.jobs.grag_build", "hpengine.pipeline.grag_build"])
def test_both_paths_run_as_modules(module, capsys, monkeypatch):
    """Each module run as ``__main__`` (what ``python -m`` does), in this process."""
    monkeypatch.delenv("HPENGINE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [module])
    with warnings.catch_warnings():  # runpy notes that the module was imported before: expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(SystemExit) as stop:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    out, err = capsys.readouterr()
    assert stop.value.code == 2, err
    assert err.startswith("hpengine: error: grag-build takes the index folder first"), err
    assert err.count("\n") == 1
    assert not out
