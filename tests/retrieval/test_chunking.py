import pytest

from hpengine.retrieval import plan_hop


def test_plan_follows_the_documented_formula():
    plan = plan_hop(10_000, num_facts=100_000, num_columns=63_000, subgraph_size=600, dim=384, mean_row_nnz=3.6,
                    memory_budget_mb=2048)
    walk = 4 * (4 * 100_000 + 63_000) + 12 * 600
    local = 4 * 600 * 600 + 600 * 384 * 8 + int(112 * 600 * 3.6) + 64 * 600
    assert (plan.walk_bytes, plan.local_bytes) == (walk, local)
    assert plan.chunk_size == int(0.75 * 2048 * 2**20) // max(walk, local)
    assert 400 <= plan.chunk_size <= 500  # the docstring's example
    assert plan.max_pairs == min(2048 * 2**20 // 4 // 64, 1 << 18)


@pytest.mark.parametrize("num_q", [0, 1, 7])
def test_plan_bounds(num_q):
    plan = plan_hop(num_q, num_facts=50, num_columns=20, subgraph_size=600, dim=8, mean_row_nnz=2.0,
                    memory_budget_mb=1)
    assert 1 <= plan.chunk_size <= max(num_q, 1)
    assert plan_hop(num_q, num_facts=10**6, num_columns=10**5, subgraph_size=600, dim=8, mean_row_nnz=2.0,
                    memory_budget_mb=1).chunk_size == 1
    assert plan_hop(100, num_facts=50, num_columns=20, subgraph_size=600, dim=8, mean_row_nnz=2.0,
                    memory_budget_mb=1, query_chunk_size=5).chunk_size == 5


def test_a_budget_left_to_the_device_follows_its_free_memory(monkeypatch):
    """0: the CPU default on the CPU; on CUDA an eighth of the free memory, never below the CPU's."""
    import torch

    from hpengine.retrieval._chunking import resolve_memory_budget_mb

    assert resolve_memory_budget_mb(0, "cpu", 2048) == 2048
    assert resolve_memory_budget_mb(64, "cpu", 2048) == 64
    free = {"bytes": 128 << 30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 141 << 30))
    assert resolve_memory_budget_mb(0, "cuda:0", 2048) == 16 << 10
    assert resolve_memory_budget_mb(100, "cuda:0", 2048) == 100  # a set budget is the budget
    free["bytes"] = 4 << 30
    assert resolve_memory_budget_mb(0, "cuda:0", 2048) == 2048
