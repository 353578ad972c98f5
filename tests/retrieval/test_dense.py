import pytest
import torch
from hop_checks import assert_topk_equivalent

from hpengine.retrieval import DenseIndex, dense_topk
from hpengine.testing import with_devices, with_package


def brute_force(queries, keys):
    """All inner products, float64 (the reference)."""
    return queries.double().cpu() @ keys.double().cpu().T


@with_devices
@pytest.mark.parametrize("chunk", [1, 5, 17, 1000])
def test_dense_topk_matches_brute_force(chunk, device):
    gen = torch.Generator().manual_seed(0)
    q, keys = torch.randn(7, 8, generator=gen), torch.randn(50, 8, generator=gen)
    keys[3] = keys[4]  # a tie
    scores, ids = dense_topk(q.to(device), keys.to(device), 6, chunk)
    assert scores.device == torch.device(device) and ids.dtype == torch.int64
    full = brute_force(q, keys)
    for i in range(7):
        assert_topk_equivalent(ids[i].cpu(), scores[i].cpu(), dict(enumerate(full[i].tolist())), 6)


@with_devices
def test_dense_topk_k_larger_than_n_and_empty(device):
    q, keys = torch.randn(3, 4, device=device), torch.randn(5, 4, device=device)
    scores, ids = dense_topk(q, keys, 8, 2)
    assert (ids[:, 5:] == -1).all() and torch.isneginf(scores[:, 5:]).all()
    assert sorted(ids[0, :5].tolist()) == list(range(5))
    scores, ids = dense_topk(q, keys[:0], 3)
    assert ids.shape == (3, 3) and (ids == -1).all()


@with_devices
def test_dense_topk_low_precision_accumulates_in_float32(device):
    gen = torch.Generator().manual_seed(1)
    q, keys = torch.randn(4, 64, generator=gen), torch.randn(30, 64, generator=gen)
    scores, ids = dense_topk(q.bfloat16().to(device), keys.bfloat16().to(device), 3)
    assert scores.dtype == torch.float32
    full = brute_force(q.bfloat16(), keys.bfloat16())
    torch.testing.assert_close(scores.cpu().double(), full.gather(1, ids.cpu()), atol=1e-4, rtol=1e-5)


@with_devices
def test_dense_index_exact_is_cosine(device):
    gen = torch.Generator().manual_seed(2)
    keys = torch.randn(40, 6, generator=gen) * torch.rand(40, 1, generator=gen) * 5
    keys[7] = 0.0  # zero-norm key: cosine 0, never NaN
    q = torch.randn(5, 6, generator=gen)
    index = DenseIndex(keys.to(device))
    scores, ids = index.search(q.to(device), 4)
    kn = keys / keys.norm(dim=1, keepdim=True).clamp(min=1e-30)
    cos = (q / q.norm(dim=1, keepdim=True)) @ kn.T
    for i in range(5):
        assert_topk_equivalent(ids[i].cpu(), scores[i].cpu(), dict(enumerate(cos[i].tolist())), 4)
    got = index.cosine(q.to(device), torch.tensor([[7, 0, -1]] * 5, device=device)).cpu()
    torch.testing.assert_close(got, torch.stack([torch.zeros(5), cos[:, 0], torch.zeros(5)], 1), atol=1e-6, rtol=0)


@with_package("faiss")
def test_faiss_backends():
    gen = torch.Generator().manual_seed(3)
    keys, q = torch.randn(500, 16, generator=gen), torch.randn(9, 16, generator=gen)
    exact = DenseIndex(keys).search(q, 5)
    flat = DenseIndex(keys, backend="faiss_flat").search(q, 5)
    torch.testing.assert_close(flat[0], exact[0], atol=1e-5, rtol=0)
    assert torch.equal(flat[1], exact[1])
    ivf = DenseIndex(keys, backend="faiss_ivf", nlist=12, nprobe=12)  # all cells probed
    torch.testing.assert_close(ivf.search(q, 5)[0], exact[0], atol=1e-5, rtol=0)
    coarse = DenseIndex(keys, backend="faiss_ivf", nlist=12, nprobe=1).search(q, 5)
    assert coarse[1].shape == (9, 5) and coarse[1].dtype == torch.int64  # approximate, may pad with -1
    assert torch.isneginf(coarse[0][coarse[1] < 0]).all()


@with_package("faiss")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_faiss_ivf_over_half_keys_stores_half_codes(dtype, monkeypatch):
    """Half keys: IVF holds fp16 codes (half the memory of IVFFlat); with every cell probed it
    finds the exact search's keys, built in chunks and trained on a sample as at scale."""
    import faiss

    import hpengine.retrieval._dense as mod

    gen = torch.Generator().manual_seed(4)
    keys, q = torch.randn(600, 16, generator=gen).to(dtype), torch.randn(7, 16, generator=gen)
    exact = DenseIndex(keys).search(q, 5)
    monkeypatch.setattr(mod, "IVF_TRAIN_MAX_BYTES", 4 * 16 * 100)  # trains on 12 * 256 > 600: all rows
    for chunk in (64, 65536):
        ivf = DenseIndex(keys, backend="faiss_ivf", nlist=12, nprobe=12, chunk_size=chunk)
        assert isinstance(ivf._faiss, faiss.IndexIVFScalarQuantizer) and ivf._faiss.ntotal == 600
        got = ivf.search(q, 5)
        torch.testing.assert_close(got[0], exact[0], atol=2e-3, rtol=0)
    assert torch.equal(DenseIndex(keys, chunk_size=7).inv_norm, DenseIndex(keys).inv_norm)
    monkeypatch.setattr(mod, "IVF_TRAIN_MAX_BYTES", 0)
    assert len(DenseIndex(keys[:3])._training_rows(1)) == 3
    rows = DenseIndex(keys)._training_rows(2)
    assert len(rows) == 512 and rows[0] == 0 and rows[-1] == 599 and bool((rows[1:] > rows[:-1]).all())


@with_package("faiss")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_faiss_ivf_product_quantizer_codes_rescore_exactly(dtype, monkeypatch):
    """Product-quantizer codes (what large key sets get): the returned scores are the exact cosines
    of the returned ids, and with every cell probed and every key a candidate the result is the
    exact search's; with few candidates most of the exact top keys are still found."""
    import faiss

    import hpengine.retrieval._dense as mod

    gen = torch.Generator().manual_seed(5)
    centres = torch.randn(40, 32, generator=gen)
    keys = (centres[torch.randint(0, 40, (3000,), generator=gen)] + 0.3 * torch.randn(3000, 32, generator=gen))
    keys, q = keys.to(dtype), centres[:9] + 0.3 * torch.randn(9, 32, generator=gen)
    exact = DenseIndex(keys).search(q, 5)
    every = DenseIndex(keys, backend="faiss_ivf", nlist=8, nprobe=8, codes="pq", refine=600)  # 5 * 600: all keys
    assert isinstance(every._faiss, faiss.IndexIVFPQ) and every.codes == "pq" and every._faiss.pq.M == 8
    got = every.search(q, 5)
    assert torch.equal(got[1], exact[1])
    torch.testing.assert_close(got[0], exact[0], atol=1e-6, rtol=0)
    few = DenseIndex(keys, backend="faiss_ivf", nlist=8, nprobe=8, codes="pq", refine=20).search(q, 5)
    torch.testing.assert_close(few[0], every.cosine(q, few[1]), atol=1e-6, rtol=0)  # exact cosines
    found = sum(len(set(a) & set(b)) for a, b in zip(few[1].tolist(), exact[1].tolist()))
    assert found >= 0.9 * exact[1].numel()  # 100 of 3000 keys re-scored (tight clusters: PQ codes alone tie)
    padded = DenseIndex(keys[:50], backend="faiss_ivf", nlist=1, nprobe=1, codes="pq").search(q, 60)
    assert padded[1].shape == (9, 60) and (padded[1][:, 50:] == -1).all() and torch.isneginf(padded[0][:, 50:]).all()
    assert sorted(padded[1][0, :50].tolist()) == list(range(50))
    monkeypatch.setattr(mod, "PQ_MIN_BYTES", 3000 * 32 * keys.element_size() - 1)  # auto: just past full codes
    assert DenseIndex(keys, backend="faiss_ivf", nlist=8).codes == "pq"
    assert DenseIndex(keys[:-1], backend="faiss_ivf", nlist=8).codes == "full"
    assert DenseIndex(keys, backend="auto").codes is None and DenseIndex(keys, backend="faiss_flat").codes is None


@with_package("faiss")
def test_an_approximate_build_releases_every_block_it_read():
    keys = torch.randn(1000, 8, generator=torch.Generator().manual_seed(6))
    seen = []
    DenseIndex(keys, backend="faiss_ivf", nlist=4, chunk_size=300, release=seen.append)
    covered = torch.zeros(1000, dtype=torch.bool)
    for rows in seen:  # views of the keys
        assert rows.untyped_storage().data_ptr() == keys.untyped_storage().data_ptr()
        start = (rows.data_ptr() - keys.data_ptr()) // (8 * keys.element_size())
        covered[start:start + rows.shape[0]] = True
    assert covered.all() and len(seen) == 4 + 4 + 4  # norms, the training sample's blocks, add
    exact = []
    DenseIndex(keys, release=exact.append)
    assert exact == []  # an exact index reads its keys on every search


def test_dense_errors():
    with pytest.raises(ValueError, match="same dim"):
        dense_topk(torch.randn(2, 3), torch.randn(4, 5), 1)
    with pytest.raises(TypeError, match="floating point"):
        dense_topk(torch.ones(2, 3, dtype=torch.long), torch.randn(4, 3), 1)
    with pytest.raises(ValueError, match="chunk_size"):
        dense_topk(torch.randn(2, 3), torch.randn(4, 3), 1, chunk_size=0)
    with pytest.raises(ValueError, match="backend must be one of"):
        DenseIndex(torch.randn(4, 3), backend="hnsw")
    with pytest.raises(ValueError, match="codes must be one of"):
        DenseIndex(torch.randn(4, 3), codes="hnsw")
    with pytest.raises(ValueError, match="D=3"):
        DenseIndex(torch.randn(4, 3)).search(torch.randn(2, 5), 1)
