import pytest
import torch
from hop_checks import assert_topk_equivalent

from hpengine.retrieval._topk import blocked_topk
from hpengine.testing import with_devices


@with_devices
@pytest.mark.parametrize("n, k, block", [(1000, 7, None), (1000, 30, 8), (997, 60, 16), (50, 10, 8), (64, 64, 8),
                                         (300, 0, None), (301, 5, 4)])
def test_blocked_topk_matches_torch(n, k, block, device):
    gen = torch.Generator().manual_seed(n + k)
    x = torch.randn(4, n, generator=gen)
    x[0, :40] = 0.0  # ties
    x[1] = torch.randint(0, 5, (n,), generator=gen).float()  # many ties
    x[2, 3] = float("inf")
    x = x.to(device)
    for dim, data in ((1, x), (0, x.t().contiguous())):
        values, ids = blocked_topk(data, k, dim=dim, block=block)
        assert values.shape == ids.shape == (4, k)
        ref, _ = torch.topk(x, k, dim=1)
        assert torch.equal(values, ref)
        for q in range(4):
            assert_topk_equivalent(ids[q].cpu(), values[q].cpu(), dict(enumerate(x[q].tolist())), k, atol=0.0)


def test_blocked_topk_errors():
    with pytest.raises(ValueError, match="2-D"):
        blocked_topk(torch.zeros(3), 1)
    with pytest.raises(ValueError, match="k must lie"):
        blocked_topk(torch.zeros(2, 3), 4)
