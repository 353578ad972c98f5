"""Dense fact and passage search by size: ``retrieval.seed_backend="auto"`` (the default) is exact
below ``approximate_min_keys`` and FAISS IVF from there on. The default keeps a small index's
outputs exactly those of ``seed_backend="exact"``; forcing IVF on it (cells searched >= cells
there: an exhaustive IVF) gives the exact rankings, so the switch itself changes nothing but the
search; the forced-approximate recall on real dev sets is benchmarks/ops/bench_dense.py's."""
import dataclasses

import pytest
import torch

from hpengine.config import RetrievalConfig
from hpengine.pipeline import Engine
from hpengine.retrieval import DenseIndex, resolve_backend

METHODS = ("dense", "hyperprove", "ppr")


@pytest.fixture(scope="module")
def built(builtin_index):
    index, encoder, questions = builtin_index
    return index, encoder, [q.question for q in questions]


def _answers(index, encoder, questions, method, **retrieval):
    engine = Engine(index, encoder, RetrievalConfig(**retrieval), retriever=method)
    return engine, [dataclasses.asdict(p) for p in engine.answer(questions)]


def test_auto_resolves_by_size():
    keys = torch.randn(100, 8)
    assert RetrievalConfig().seed_backend == "auto" and RetrievalConfig().approximate_min_keys == 1_000_000
    assert DenseIndex(keys, backend="auto").backend == "exact"
    assert DenseIndex(keys, backend="auto", approximate_min_keys=101).backend == "exact"
    assert DenseIndex(keys, backend="auto", approximate_min_keys=100).backend == "faiss_ivf"
    assert not DenseIndex(keys, backend="auto", approximate_min_keys=100).exact
    assert resolve_backend("faiss_flat", 10**9) == "faiss_flat" and resolve_backend("exact", 10**9) == "exact"
    with pytest.raises(ValueError, match="backend must be one of .* \\(got 'hnsw'\\)"):
        resolve_backend("hnsw", 10)
    with pytest.raises(ValueError, match="retrieval.approximate_min_keys must be >= 1"):
        RetrievalConfig(approximate_min_keys=0)


@pytest.mark.parametrize("method", METHODS)
def test_the_default_is_exact_on_a_small_index(built, method):
    index, encoder, questions = built
    _, auto = _answers(index, encoder, questions, method)
    _, exact = _answers(index, encoder, questions, method, seed_backend="exact")
    assert auto == exact


@pytest.mark.parametrize("method", METHODS)
def test_forced_approximate_search_runs_every_method_and_equals_exact_when_exhaustive(built, method):
    index, encoder, questions = built
    _, exact = _answers(index, encoder, questions, method, seed_backend="exact")
    engine, approx = _answers(index, encoder, questions, method, seed_backend="auto", approximate_min_keys=1)
    assert engine.steps.fact_index().backend == "faiss_ivf"
    if method == "dense":  # the passage search went through IVF (the index is built on first use)
        assert engine.steps._passage_index is not None and engine.steps._passage_index.backend == "faiss_ivf"
    assert [a["passages"] for a in approx] == [e["passages"] for e in exact]
    assert [a["answer"] for a in approx] == [e["answer"] for e in exact]
