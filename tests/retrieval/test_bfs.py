import networkx as nx
import pytest
import torch

from hpengine.retrieval import batched_bfs
from hpengine.testing import with_devices


def reference_distances(adj, sources, depth, reverse):
    g = nx.DiGraph()
    m = adj.shape[0]
    g.add_nodes_from(range(m))
    g.add_edges_from((i, j) for i in range(m) for j in range(m) if adj[i, j] > 0)
    if reverse:
        g = g.reverse()
    src = [i for i in range(m) if sources[i]]
    dist = nx.multi_source_dijkstra_path_length(g, src, cutoff=depth) if src else {}
    return [dist.get(i, -1) for i in range(m)]


@with_devices
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("depth", [0, 1, 2, 5])
def test_matches_networkx(depth, reverse, device):
    gen = torch.Generator().manual_seed(depth)
    adj = torch.rand(5, 12, 12, generator=gen) * (torch.rand(5, 12, 12, generator=gen) < 0.15)
    sources = torch.rand(5, 12, generator=gen) < 0.15
    sources[0] = False  # no source: nothing reached
    out = batched_bfs(adj.to(device), sources.to(device), depth, reverse=reverse)
    assert out.dtype == torch.int64 and out.device == torch.device(device)
    for q in range(5):
        assert out[q].tolist() == reference_distances(adj[q], sources[q], depth, reverse)


def test_reach_grows_with_depth():
    gen = torch.Generator().manual_seed(7)
    adj = (torch.rand(3, 20, 20, generator=gen) < 0.08).float()
    sources = torch.zeros(3, 20, dtype=torch.bool)
    sources[:, 0] = True
    reach = [(batched_bfs(adj, sources, d) >= 0) for d in range(6)]
    for a, b in zip(reach, reach[1:]):
        assert (b | ~a).all()  # a subset of b


def test_errors():
    with pytest.raises(ValueError, match=r"\[Q, M, M\]"):
        batched_bfs(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="bool"):
        batched_bfs(torch.zeros(2, 3, 3), torch.zeros(2, 3), 1)
    with pytest.raises(ValueError, match="depth"):
        batched_bfs(torch.zeros(2, 3, 3), torch.zeros(2, 3, dtype=torch.bool), -1)
