"""``python -m hpengine.jobs.grag_build``, run as a module, gives the front door's one-line error and
exit status. The process-level exit statuses of the front door are tested in tests/pipeline/test_cli_errors.py."""
import runpy
import sys
import warnings

import pytest


def test_runs_as_a_module(capsys, monkeypatch):
    """The module run as ``__main__`` (what ``python -m`` does), in this process."""
    module = "hpengine.jobs.grag_build"
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
