import pytest
import torch

from hpengine.graph import HyperGraph
from hpengine.testing import with_devices
from hpengine.testing._graphs import random_hypergraph
from hpengine.testing.reference import dense_local_block, dense_transition


def test_tiny_exact():
    # facts 0,1 share entity 0 and passage 0; fact 2 is alone (no entity, own passage)
    g = HyperGraph.from_incidence(torch.tensor([[0, 1, 0], [0, 0, 0]]), torch.tensor([0, 0, 1]), 2, 2)
    assert g.nnz == 2  # duplicate pair counted once
    expected = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(g.transition().to_dense(), expected)
    torch.testing.assert_close(g.entity_degree(), torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(g.passage_degree(), torch.tensor([2.0, 1.0]))


def test_tiny_weights_follow_degrees():
    # fact 0 shares hub entity 0 (degree 3) with facts 1, 2 and passage 0 (size 2) with fact 1
    fe = torch.tensor([[0, 1, 2], [0, 0, 0]])
    fp = torch.tensor([0, 0, 1])
    t = HyperGraph.from_incidence(fe, fp, 1, 2).transition(torch.float64).to_dense()
    # W[0,1] = 1/3 + 1/2, W[0,2] = 1/3 -> row 0 = [0, 5/7, 2/7]
    torch.testing.assert_close(t[0], torch.tensor([0.0, 5 / 7, 2 / 7], dtype=torch.float64))


@pytest.mark.parametrize("seed", range(3))
def test_coalesced_pairs_are_kept_as_given(seed):
    """``coalesced=True`` (sorted unique pairs, as expand_with_synonyms gives) builds the same graph
    and operator without sorting again; int32 CSR indices, owned (not views of the pairs)."""
    fe, fp, v, p = random_hypergraph(seed)
    ref = HyperGraph.from_incidence(fe, fp, v, p)
    given = HyperGraph.from_incidence(ref.fact_entity.clone(), fp, v, p, coalesced=True).validate()
    assert torch.equal(given.fact_entity, ref.fact_entity)
    torch.testing.assert_close(given.transition(torch.float64).to_dense(), ref.transition(torch.float64).to_dense())
    b, bt = given.transition().b.outer, given.transition().bt.outer
    assert b.col_indices().dtype == torch.int32 and bt.crow_indices().dtype == torch.int32
    assert b.col_indices().untyped_storage().nbytes() == 4 * b.col_indices().numel()
    with pytest.raises(ValueError, match="fact ids"):
        HyperGraph.from_incidence(torch.tensor([[fp.numel()], [0]]), fp, v, p, coalesced=True)


@pytest.mark.parametrize("seed", range(4))
def test_entity_passage_count_equals_per_entity_sets(seed):
    fe, fp, v, p = random_hypergraph(seed)
    g = HyperGraph.from_incidence(fe, fp, v, p)
    ref = [len({int(fp[f]) for f, e in g.fact_entity.t().tolist() if e == ent}) for ent in range(v)]
    for chunk in (1, 3, 1 << 24):  # blocks of entity rows: the result does not depend on their size
        assert g.entity_passage_count(chunk).tolist() == ref


@with_devices
@pytest.mark.parametrize("seed", range(6))
def test_matches_dense_reference(seed, device):
    fe, fp, v, p = random_hypergraph(seed, device=device)
    g = HyperGraph.from_incidence(fe, fp, v, p)
    op = g.transition(torch.float64)
    ref = dense_transition(fe.cpu(), fp.cpu(), v, p)
    torch.testing.assert_close(op.to_dense().cpu(), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.t().to_dense().cpu(), ref.T, rtol=1e-12, atol=1e-12)
    rows = op.to_dense().sum(1).cpu()
    assert not torch.isnan(rows).any()
    assert torch.all(((rows - 1).abs() < 1e-12) | (rows == 0))
    assert rows[-1] == 0  # the isolated fact
    x = torch.randn(fp.numel(), 7, dtype=torch.float64, device=device)
    torch.testing.assert_close((op @ x).cpu(), ref @ x.cpu())
    torch.testing.assert_close((op.t() @ x).cpu(), ref.T @ x.cpu())
    torch.testing.assert_close((op @ x[:, 0]).cpu(), ref @ x[:, 0].cpu())


@with_devices
@pytest.mark.parametrize("seed", range(4))
def test_local_blocks_match_reference(seed, device):
    fe, fp, v, p = random_hypergraph(seed, device=device)
    g = HyperGraph.from_incidence(fe, fp, v, p)
    ref = dense_transition(fe.cpu(), fp.cpu(), v, p)
    gen = torch.Generator().manual_seed(seed)
    q, m = 5, 9
    idx = torch.randint(0, fp.numel(), (q, m), generator=gen)
    idx[0, 5:] = -1  # padding
    idx[1, 3] = idx[1, 4]  # duplicate slot
    idx[2] = -1  # empty question
    blocks = g.transition(torch.float64).local_blocks(idx.to(device)).cpu()
    assert blocks.shape == (q, m, m)
    for i in range(q):
        ids = [int(x) for x in idx[i] if x >= 0]
        expected = dense_local_block(ref, ids, m)
        # padding slots are at the end for row 0; place reference rows at the slot positions
        slots = [j for j in range(m) if idx[i, j] >= 0]
        placed = torch.zeros(m, m, dtype=torch.float64)
        placed[torch.tensor(slots, dtype=torch.long)[:, None], torch.tensor(slots, dtype=torch.long)[None, :]] = \
            expected[: len(slots), : len(slots)] if slots else placed[:0, :0]
        torch.testing.assert_close(blocks[i], placed, rtol=1e-12, atol=1e-12)
    transposed = g.transition(torch.float64).t().local_blocks(idx.to(device)).cpu()
    torch.testing.assert_close(transposed, blocks.transpose(1, 2))


def test_isolated_and_empty_graph():
    g = HyperGraph.from_incidence(torch.zeros(2, 0, dtype=torch.long), torch.tensor([0, 1, 2]), 0, 3)
    assert torch.equal(g.transition().to_dense(), torch.zeros(3, 3))
    empty = HyperGraph.from_incidence(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, 0)
    assert empty.transition().to_dense().shape == (0, 0)


def test_bad_input_errors():
    fp = torch.tensor([0, 0])
    with pytest.raises(TypeError, match="int64"):
        HyperGraph.from_incidence(torch.tensor([[0], [0]], dtype=torch.int32), fp, 1, 1)
    with pytest.raises(ValueError, match=r"\[2, nnz\]"):
        HyperGraph.from_incidence(torch.tensor([[0], [0], [0]]), fp, 1, 1)
    with pytest.raises(ValueError, match="entity ids"):
        HyperGraph.from_incidence(torch.tensor([[0], [5]]), fp, 1, 1)
    with pytest.raises(ValueError, match="fact_passage"):
        HyperGraph.from_incidence(torch.tensor([[0], [0]]), torch.tensor([0, 3]), 1, 1)
    op = HyperGraph.from_incidence(torch.tensor([[0], [0]]), fp, 1, 1).transition()
    with pytest.raises(ValueError, match="H=2"):
        op @ torch.zeros(3, 1)
    with pytest.raises(TypeError, match="dtype"):
        op @ torch.zeros(2, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\[Q, M\]"):
        op.local_blocks(torch.zeros(3, dtype=torch.long))


def test_relabeling_permutes_output():
    fe, fp, v, p = random_hypergraph(3)
    h = fp.numel()
    perm = torch.randperm(h, generator=torch.Generator().manual_seed(1))
    inv = torch.argsort(perm)
    t = HyperGraph.from_incidence(fe, fp, v, p).transition(torch.float64).to_dense()
    fe2 = torch.stack([inv[fe[0]], fe[1]])
    fp2 = fp[perm]
    t2 = HyperGraph.from_incidence(fe2, fp2, v, p).transition(torch.float64).to_dense()
    torch.testing.assert_close(t2, t[perm][:, perm])


def test_incidence_csr_views():
    fe, fp, v, p = random_hypergraph(2)
    g = HyperGraph.from_incidence(fe, fp, v, p)
    b_he = torch.zeros(fp.numel(), v)
    b_he[g.fact_entity[0], g.fact_entity[1]] = 1.0
    b_hd = torch.zeros(fp.numel(), p)
    b_hd[torch.arange(fp.numel()), fp] = 1.0
    torch.testing.assert_close(g.incidence("entity").to_dense(), b_he)
    torch.testing.assert_close(g.incidence("entity_t").to_dense(), b_he.T)
    torch.testing.assert_close(g.incidence("passage").to_dense(), b_hd)
    torch.testing.assert_close(g.incidence("passage_t").to_dense(), b_hd.T)
    assert g.incidence("entity") is g.incidence("entity")  # built once, cached
    with pytest.raises(ValueError, match="kind must be one of"):
        g.incidence("fact")


def test_csr_arrays_round_trip_through_gather():
    from hpengine.sparse import csr_arrays, gather_csr_rows

    g = torch.Generator().manual_seed(3)
    rows, cols = torch.randint(0, 7, (40,), generator=g), torch.randint(0, 100, (40,), generator=g)
    crow, col = csr_arrays(rows, cols, 9)
    assert crow[-1].item() == 40 and crow.numel() == 10
    for r in range(9):  # each row's columns, in their original order
        pos, got = gather_csr_rows(crow, col, torch.tensor([r]))
        assert got.tolist() == [c for rr, c in zip(rows.tolist(), cols.tolist()) if rr == r]
