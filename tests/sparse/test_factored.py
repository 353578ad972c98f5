"""The factored expanded incidence ``B = bin(R (I + N)) = R (I + N) - K`` against dense float64
math on random graphs: products, counts, rows, and the excess ``K`` itself."""
import pytest
import torch

from hpengine.sparse import SparseChain, expanded_rows, factored_incidence, row_pairs
from hpengine.sparse._factored import closed_relation_pairs, excess_pairs, neighbour_signatures, row_pair_positions
from hpengine.testing import with_devices


def random_factors(seed: int, h: int = 40, c: int = 25, max_row: int = 5, relation: int = 30, device="cpu"):
    """Row-sorted unique pairs of a random ``R [h, c]`` (0..max_row entries a row) and random
    relation pairs on its columns (repeats, self pairs and one-sided pairs included)."""
    g = torch.Generator().manual_seed(seed)
    rows, cols = [], []
    for f in range(h):
        k = int(torch.randint(0, max_row + 1, (1,), generator=g))
        picked = torch.randperm(c, generator=g)[:k].sort().values
        rows += [f] * k
        cols += picked.tolist()
    pairs = torch.tensor([rows, cols], dtype=torch.int64).view(2, -1)
    rel = torch.randint(0, c, (2, relation), generator=g)
    return pairs.to(device), rel.to(device)


def dense_reference(pairs, relation, h, c):
    r = torch.zeros(h, c, dtype=torch.float64)
    r[pairs[0].cpu(), pairs[1].cpu()] = 1.0
    n = torch.eye(c, dtype=torch.float64)
    n[relation[0].cpu(), relation[1].cpu()] = 1.0
    return (r @ n > 0).double(), r @ n


@pytest.mark.parametrize("seed", range(6))
@with_devices
def test_factored_incidence_equals_the_materialised_expansion(seed, device):
    h, c = 40, 25
    pairs, relation = random_factors(seed, h, c, device=device)
    b, bt, row_count, col_count = factored_incidence(pairs, relation, h, c, torch.float64)
    want, counted = dense_reference(pairs, relation, h, c)
    assert torch.equal(b.to_dense().cpu(), want)
    assert torch.equal(bt.to_dense().cpu(), want.T)
    assert torch.equal(row_count.cpu(), want.sum(1).long()) and torch.equal(col_count.cpu(), want.sum(0).long())
    k = b.minus.to_dense().cpu()
    assert torch.equal(k, (counted - want).clamp(min=0))  # exactly the excess
    x = torch.randn(c, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(device)
    out = torch.randn(h, 3, dtype=torch.float64, device=device)
    got = b.addmm(out.clone(), x, beta=0.5, alpha=2.0)
    torch.testing.assert_close(got.cpu(), 0.5 * out.cpu() + 2.0 * want @ x.cpu())
    buf = out.clone()
    b.addmm(buf, x, beta=0.0, out=buf)
    torch.testing.assert_close(buf.cpu(), want @ x.cpu())


@pytest.mark.parametrize("seed", range(4))
def test_scaled_chain_is_the_diagonally_scaled_matrix(seed):
    h, c = 30, 20
    pairs, relation = random_factors(seed, h, c)
    b, bt, _, _ = factored_incidence(pairs, relation, h, c, torch.float64)
    g = torch.Generator().manual_seed(seed)
    row, col = torch.rand(h, generator=g, dtype=torch.float64), torch.rand(c, generator=g, dtype=torch.float64)
    want = b.to_dense()
    torch.testing.assert_close(b.scaled(row, col).to_dense(), row[:, None] * want * col[None, :])
    torch.testing.assert_close(bt.scaled(col, row).to_dense(), col[:, None] * want.T * row[None, :])
    plain = SparseChain(want.to_sparse_csr())
    assert not plain.factored
    torch.testing.assert_close(plain.scaled(row, None).to_dense(), row[:, None] * want)


@pytest.mark.parametrize("seed", range(4))
def test_expanded_rows_lists_each_rows_columns_once(seed):
    h, c = 40, 25
    pairs, relation = random_factors(seed, h, c)
    b, _, row_count, _ = factored_incidence(pairs, relation, h, c, torch.float32)
    want, _ = dense_reference(pairs, relation, h, c)
    rows = torch.tensor([3, -1, 0, 3, h - 1, 7])
    count, col = expanded_rows(b, rows)
    at = 0
    for i, f in enumerate(rows.tolist()):
        got = col[at:at + int(count[i])].tolist()
        at += int(count[i])
        assert got == ([] if f < 0 else torch.nonzero(want[f]).squeeze(1).tolist())
        if f >= 0:
            assert int(count[i]) == int(row_count[f])


def test_row_pairs_lists_every_pair_within_a_row():
    pairs = torch.tensor([[0, 0, 0, 2, 2, 3], [1, 4, 6, 0, 9, 5]])
    got = row_pairs(pairs, 4)
    assert got.tolist() == [[0, 0, 0, 2], [1, 1, 4, 0], [4, 6, 6, 9]]


def test_row_pair_positions_index_the_pairs_of_row_pairs():
    pairs = torch.tensor([[0, 0, 0, 2, 2, 3], [1, 4, 6, 0, 9, 5]])
    left, right = row_pair_positions(pairs[0], 4)
    assert left.tolist() == [0, 0, 1, 3] and right.tolist() == [1, 2, 2, 4]


@pytest.mark.parametrize("seed", range(2))
def test_signatures_of_selected_rows_are_those_rows_of_all_signatures(seed):
    c = 200
    gen = torch.Generator().manual_seed(seed)
    closed = closed_relation_pairs(torch.randint(0, c, (2, 500), generator=gen), c)
    rows = torch.rand(c, generator=gen) < 0.3
    assert torch.equal(neighbour_signatures(closed, c, rows=rows), neighbour_signatures(closed, c)[rows])


def test_excess_of_a_row_reaching_one_column_three_times():
    # row 0 holds columns 0, 1, 2, all related to 3 and to each other: 3 is reached 3 times, 0..2 3 times
    relation = torch.tensor([[0, 1, 2, 0, 1, 0], [3, 3, 3, 1, 2, 2]])
    relation = torch.cat([relation, relation.flip(0)], 1)
    closed = closed_relation_pairs(relation, 5)
    extra, excess = excess_pairs(torch.tensor([[0, 0, 0], [0, 1, 2]]), closed, 1, 5)
    assert extra.tolist() == [[0, 0, 0, 0], [0, 1, 2, 3]] and excess.tolist() == [2, 2, 2, 2]


def test_no_relation_is_the_plain_incidence():
    pairs = torch.tensor([[0, 0, 1], [0, 2, 1]])
    b, bt, rc, cc = factored_incidence(pairs, torch.zeros(2, 0, dtype=torch.int64), 2, 3, torch.float32)
    assert b.minus._nnz() == 0 and torch.equal(b.to_dense(), torch.tensor([[1.0, 0, 1], [0, 1, 0]]))
    assert rc.tolist() == [2, 1] and cc.tolist() == [1, 1, 1]


@pytest.mark.parametrize("seed", range(3))
def test_signatures_are_the_or_of_each_rows_bits_and_never_miss_a_shared_column(seed):
    c = 300
    relation = torch.randint(0, c, (2, 900), generator=torch.Generator().manual_seed(seed))
    closed = closed_relation_pairs(relation, c)
    sig = neighbour_signatures(closed, c)
    rows = [set() for _ in range(c)]
    for r, x in closed.t().tolist():
        rows[r].add(x)
    words = sig.shape[1]
    for r in range(c):
        want = [0] * words
        for x in rows[r]:
            bit = (x * 2654435761) % (63 * words)
            want[bit // 63] |= 1 << (bit % 63)
        assert sig[r].tolist() == want
    a, b = torch.randint(0, c, (2, 2000), generator=torch.Generator().manual_seed(100 + seed))
    share = torch.tensor([bool(rows[i] & rows[j]) for i, j in zip(a.tolist(), b.tolist())])
    passes = (sig[a] & sig[b]).ne(0).any(1)
    assert not (share & ~passes).any()  # sharing a column means sharing its bit
    assert int(passes.sum()) < a.numel()  # and most pairs that share nothing are ruled out
