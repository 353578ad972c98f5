"""The seeded Gumbel sampler on every device: CUDA hashes the whole vocabulary, CPU only the
tokens that can win; both draw what the CPU reference with noise on every token draws.
Needs torch only (it runs in benchmarks/e2e/gpu_checks.sh)."""
import torch

from hpengine.models._sampling import SeededGumbelSampler, gumbel_noise
from hpengine.testing import with_devices


@with_devices
def test_sampler_draws_the_reference_draws_on_every_device(device):
    gen = torch.Generator().manual_seed(3)
    rows, vocab = 16, 5000
    scores = torch.randn(rows, vocab, generator=gen) * 4.0
    temperatures = [0.0, 0.7, 1.0, 2.0] * 4
    seeds = list(range(7, 7 + rows))
    reference = SeededGumbelSampler(temperatures, seeds, start=4, prune=False)
    on_device = SeededGumbelSampler(temperatures, seeds, start=4)  # the default for the device
    for step in range(4):
        ids = torch.zeros(rows, 4 + step, dtype=torch.long)
        want = reference(ids, scores)
        got = on_device(ids.to(device), scores.to(device)).cpu()
        assert torch.equal(got.argmax(1), want.argmax(1))
        kept = torch.isfinite(got)
        torch.testing.assert_close(got[kept], want[kept], rtol=0, atol=1e-5)


@with_devices
def test_noise_hash_is_the_same_on_every_device(device):
    seeds = torch.tensor([0, 1, 2**32 - 1, 123456789])
    want = gumbel_noise(seeds, 5, 3000)
    got = gumbel_noise(seeds.to(device), 5, 3000).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
