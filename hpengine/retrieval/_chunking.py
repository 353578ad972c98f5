"""Memory model of one retrieval hop: how many questions fit in one chunk of a memory budget."""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: bytes of temporaries per materialised (slot, slot, column) pair in ``local_blocks``
PAIR_BYTES = 64
#: bytes of temporaries per incidence entry of the local subgraph in ``local_blocks``
ENTRY_BYTES = 112
#: most join pairs per slice: 2 MB temporaries stay in cache and in the allocator's free lists
#: (bench_hop, H = 10k, Q = 256, one CPU thread: local_blocks 2.4 ms/q unsliced, 1.2 ms/q at 2^18)
PAIR_SLICE = 1 << 18


#: the share of a CUDA device's free memory that a chunk may use when the budget is left to the
#: device (0): on an H200, a 16 GiB budget ran the 1M-fact hop 1.6x faster at Q = 1,024 than the
#: CPU's 2 GiB (docs/guides/gpu.md)
CUDA_FREE_SHARE = 0.125
#: the budgets (MiB) on the CPU when the config leaves them to the device: a hop's chunk, a PPR chunk
HOP_BUDGET_MB = 2048
PPR_BUDGET_MB = 1024


def resolve_memory_budget_mb(memory_budget_mb: int, device, cpu_default: int) -> int:
    """The working-memory budget of one chunk in MiB: ``memory_budget_mb`` when it is set (> 0);
    else ``cpu_default`` on the CPU, and on a CUDA device ``CUDA_FREE_SHARE`` of its free memory
    (at least ``cpu_default``). The chunk size never changes results, only speed and peak memory.

    Example:
        >>> resolve_memory_budget_mb(0, "cpu", 2048), resolve_memory_budget_mb(512, "cuda", 2048)
        (2048, 512)
    """
    if memory_budget_mb > 0:
        return int(memory_budget_mb)
    device = torch.device(device)
    if device.type != "cuda":
        return cpu_default
    free, _ = torch.cuda.mem_get_info(device)
    return max(cpu_default, int(free * CUDA_FREE_SHARE) >> 20)


@dataclass(frozen=True)
class HopPlan:
    """Sizes derived from a memory budget (all in bytes unless named otherwise).

    Attributes:
        chunk_size: questions per chunk (``Qc``).
        walk_bytes: per-question bytes of the walk stage.
        local_bytes: per-question bytes of the local-block stage.
        max_pairs: most join pairs materialised at once by ``local_blocks``.
        key_chunk: keys per chunk of the exact dense seed search.
    """

    chunk_size: int
    walk_bytes: int
    local_bytes: int
    max_pairs: int
    key_chunk: int


def plan_hop(num_questions: int, *, num_facts: int, num_columns: int, subgraph_size: int, dim: int,
             mean_row_nnz: float, memory_budget_mb: int, query_chunk_size: int = 0,
             value_bytes: int = 4, embedding_bytes: int = 4, device_type: str = "cpu") -> HopPlan:
    """Chunk size and join slice size of a hop from a memory budget.

    The stages of a chunk run one after the other and free their tensors, so the peak is the
    larger stage, not the sum. With ``H`` facts, ``C = V + P`` incidence columns, ``m = min(M, H)``,
    ``D`` the embedding dim, ``R`` the mean incidences per fact, ``b`` the bytes of a float of the
    operator (4) and ``e`` of an embedding value, the bytes per question are::

        walk  = b * (4 H + C) + 12 m          # cosines of all facts, x_t, x_{t+1}, visits [H]
                                              # (the transposed visits reuse x_t); B^T x [C];
                                              # top-m values and ids
        local = b * m^2                       # the T* block [m, m]
              + m * D * (e + 4)               # gathered embeddings (+ float32 copy) for the
                                              # cosines (FAISS backends or given seeds)
              + 112 * m * R                   # join entries (keys, slots, groups, ...)
              + 64 * m                        # BFS masks, distances, scores

    A quarter of the budget is set aside for the join pairs of ``local_blocks`` (64 bytes each,
    materialised in slices of ``max_pairs = budget / 4 / 64`` pairs, at most ``2^18`` on CPU) and
    for the FAISS/chunked dense search (a ``[Qc, key_chunk]`` float32 tile plus a float32 key
    chunk). The rest bounds ``Qc = floor(0.75 * budget / max(walk, local))``, at least 1 and at
    most ``num_questions``; ``query_chunk_size > 0`` overrides it. Fixed costs (graph, embeddings,
    outputs ``[Q, M]``) come on top.

    Example: ``H = 100,000``, ``C = 63,000``, ``M = 600``, ``D = 384``, ``R = 3.6``, float32:
    walk 1.85 MB, local 3.56 MB per question, so the default 2 GiB budget gives chunks of 451
    questions; 10,000 questions run in 23 chunks (bench_hop --memory-check: process peak RSS
    2.3 GiB, graph and embeddings included).

    Returns:
        :class:`HopPlan`.

    Example:
        >>> plan_hop(10_000, num_facts=100_000, num_columns=63_000, subgraph_size=600, dim=384,
        ...          mean_row_nnz=3.6, memory_budget_mb=2048).chunk_size
        451
    """
    budget = int(memory_budget_mb) * 2**20
    m = min(subgraph_size, num_facts)
    walk = value_bytes * (4 * num_facts + num_columns) + 12 * m
    local = value_bytes * m * m + m * dim * (embedding_bytes + 4) + int(ENTRY_BYTES * m * mean_row_nnz) + 64 * m
    per_question = max(walk, local, 1)
    if query_chunk_size > 0:
        chunk = query_chunk_size
    else:
        chunk = int(0.75 * budget) // per_question
    chunk = max(1, min(chunk, max(num_questions, 1)))
    reserve = budget // 4
    max_pairs = max(1, reserve // PAIR_BYTES)
    if device_type == "cpu":  # cache-sized slices; on CUDA fewer, larger slices mean fewer launches
        max_pairs = min(max_pairs, PAIR_SLICE)
    key_chunk = max(1024, reserve // max(1, 4 * (chunk + dim)))
    return HopPlan(chunk, walk, local, max_pairs, key_chunk)
