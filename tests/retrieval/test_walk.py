import pytest
import torch

from hpengine.graph import HyperGraph
from hpengine.retrieval import restart_distribution, top_visited, walk_visits
from hpengine.testing import with_devices
from hpengine.testing._graphs import random_hypergraph
from hpengine.testing.reference import dense_transition


@with_devices
@pytest.mark.parametrize("steps", [0, 1, 4])
def test_walk_matches_dense_formula(steps, device):
    fe, fp, v, p = random_hypergraph(2)
    g = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
    t = dense_transition(fe, fp, v, p)
    ids = torch.tensor([[0, 5, -1, 7], [3, 3, 39, -1]], device=device)  # repeats add up, -1 adds nothing
    mass = torch.tensor([[0.5, 0.25, 0.9, 0.25], [0.25, 0.25, 0.5, 0.7]], device=device)
    visits = walk_visits(g.transition(torch.float64), ids, mass, walk_steps=steps, restart=0.2)
    r0 = torch.zeros(40, 2, dtype=torch.float64)
    for q in range(2):
        for h, w in zip(ids[q].tolist(), mass[q].tolist()):
            if h >= 0:
                r0[h, q] += w
    x, expected = r0.clone(), r0.clone()
    for _ in range(steps):
        x = 0.8 * (t.T @ x) + 0.2 * r0
        expected += x
    torch.testing.assert_close(visits.cpu(), expected, atol=1e-6, rtol=1e-6)
    # the fused walk equals the public operator: (1 - c) op.t() @ x + c r0
    op = g.transition(torch.float64)
    one = walk_visits(op, ids, mass, walk_steps=1, restart=0.2) - r0.to(device)
    torch.testing.assert_close(one, 0.8 * (op.t() @ r0.to(device)) + 0.2 * r0.to(device))


def test_workspace_is_reused():
    fe, fp, v, p = random_hypergraph(3)
    op = HyperGraph.from_incidence(fe, fp, v, p).transition()
    ws = {}
    ids, mass = torch.tensor([[1, 2]]), torch.tensor([[0.5, 0.5]])
    a = walk_visits(op, ids, mass, walk_steps=2, restart=0.3, workspace=ws)
    ptr = ws["x"].data_ptr()
    b = walk_visits(op, ids, mass, walk_steps=2, restart=0.3, workspace=ws)
    assert ws["x"].data_ptr() == ptr and torch.equal(a, b)


def test_restart_distribution():
    seeds = torch.tensor([[4, 4, 2, -1], [1, 2, 3, 5], [-1, -1, -1, -1]])
    cos = torch.tensor([[0.6, 0.6, 0.2, 0.9], [-0.1, -0.3, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5]])
    frontier = torch.tensor([[7, 7], [2, -1], [-1, -1]])
    ids, mass = restart_distribution(seeds, cos, frontier, frontier_weight=1.0)
    assert ids.shape == (3, 6)
    # question 0: seeds 4 (0.6) and 2 (0.2) -> 0.75, 0.25 of half the mass; frontier 7 the other half
    torch.testing.assert_close(mass[0], torch.tensor([0.375, 0.0, 0.125, 0.0, 0.5, 0.0]))
    # question 1: every cosine <= 0 -> uniform seeds; frontier fact 2 is also a seed (counted twice)
    torch.testing.assert_close(mass[1], torch.tensor([0.125, 0.125, 0.125, 0.125, 0.5, 0.0]))
    assert (mass[2] == 0).all()  # nothing to restart from
    _, uniform = restart_distribution(seeds, cos, frontier, frontier_weight=3.0, seed_weighting="uniform")
    torch.testing.assert_close(uniform[0], torch.tensor([0.125, 0.0, 0.125, 0.0, 0.75, 0.0]))


def test_top_visited_forces_and_drops_unvisited():
    visits = torch.tensor([[0.0, 0.5], [0.3, 0.0], [0.2, 0.1], [0.0, 0.2], [0.0, 0.0]])  # [H=5, Q=2]
    forced = torch.tensor([[4, -1], [-1, -1]])
    out = top_visited(visits.clone(), forced, 3)
    assert out.tolist() == [[4, 1, 2], [0, 3, 2]]
    out = top_visited(visits.clone(), torch.full((2, 0), -1), 4)
    assert out.tolist() == [[1, 2, -1, -1], [0, 3, 2, -1]]
