"""Orchestration: index jobs, the QA engine, command line."""
from hpengine.pipeline._index_job import run_add, run_index

__all__ = ["run_add", "run_index"]
