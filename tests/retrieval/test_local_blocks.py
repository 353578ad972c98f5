"""local_blocks' join: slicing (max_pairs) and the out= buffer (hpengine/sparse/_transition.py)."""
import pytest
import torch

from hpengine.graph import HyperGraph
from hpengine.testing import with_devices
from hpengine.testing._graphs import power_law_hypergraph, random_hypergraph


@with_devices
@pytest.mark.parametrize("seed", range(3))
def test_slices_and_out_buffer_do_not_change_blocks(seed, device):
    fe, fp, v, p = random_hypergraph(seed) if seed < 2 else power_law_hypergraph(90, seed=seed)
    g = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
    op = g.transition(torch.float64)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, fp.numel(), (7, 11), generator=gen)
    idx[1, 3] = idx[1, 4] = 5  # duplicate slot
    idx = idx.to(device)
    whole = op.local_blocks(idx)
    for max_pairs in (1, 3, 7, 50, 10**6):
        torch.testing.assert_close(op.local_blocks(idx, max_pairs=max_pairs), whole, atol=1e-12, rtol=0)
    buf = torch.full((7, 11, 11), 3.0, dtype=torch.float64, device=device)
    got = op.local_blocks(idx, out=buf)
    assert got.data_ptr() == buf.data_ptr()
    torch.testing.assert_close(got, whole, atol=1e-12, rtol=0)
    torch.testing.assert_close(op.t().local_blocks(idx, out=buf.clone()), whole.transpose(1, 2))
    rows = whole.sum(2)
    assert torch.all(((rows - 1).abs() < 1e-12) | (rows == 0))


def test_out_buffer_errors():
    fe, fp, v, p = random_hypergraph(0)
    op = HyperGraph.from_incidence(fe, fp, v, p).transition()
    idx = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="contiguous"):
        op.local_blocks(idx, out=torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="max_pairs"):
        op.local_blocks(idx, max_pairs=0)
    assert op.local_blocks(torch.full((2, 0), -1)).shape == (2, 0, 0)
