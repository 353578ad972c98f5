"""GRAG-MH's index parts (docs/methods/grag.md#index-parts): the triple knowledge graph, its Louvain communities
and one summary node per community, stored beside an index as optional files.

On-disk (inside the index folder, written by the same atomic :meth:`~hpengine.graph.Index.save`)::

    grag.json          format version, relations [T], summaries [C], build config and report
    grag.safetensors   triple_head [T], triple_tail [T] (entity ids), triple_fact [T] (fact ids;
                       the passage is sigma of it), community [V] (summary id or -1),
                       summary_crow [C+1], summary_col [nnz] (member entity ids), summary_emb [C, D]

Graph nodes are the index's entities ``[0, V)`` followed by the summary nodes ``[V, V + C)``.
Edges (undirected): head -- tail of every triple (one edge per pair), summary -- member
("summarizes"). An entity node's passages are those of its triples; a summary node's are its
members'. An entity node's embedding is its name's embedding plus the mean embedding of its
triples' facts, L2-normalised ("entity name with its facts" without a second encoder pass over V
texts); a summary node's is the encoder's embedding of its summary text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from hpengine.graph._store import write_json_durable

GRAG_FORMAT_VERSION = 1
GRAG_META, GRAG_TENSORS = "grag.json", "grag.safetensors"
_INT = ("triple_head", "triple_tail", "triple_fact", "community", "summary_crow", "summary_col")


@dataclass
class GragParts:
    """The triple graph, communities and summary nodes of one index (module docstring).

    Attributes:
        triple_head, triple_tail, triple_fact: int64 ``[T]``.
        relations: ``T`` relation phrases.
        community: int64 ``[V]`` summary node of each entity (``-1``: in no summarised community).
        summary_crow, summary_col: CSR ``[C + 1]``, ``[nnz]`` members of each summary node.
        summaries: ``C`` summary texts.
        summary_emb: float ``[C, D]``, L2-normalised.
        meta: build config and report.
    """

    triple_head: Tensor
    triple_tail: Tensor
    triple_fact: Tensor
    relations: list
    community: Tensor
    summary_crow: Tensor
    summary_col: Tensor
    summaries: list
    summary_emb: Tensor
    meta: dict = field(default_factory=dict)

    @property
    def num_triples(self) -> int:
        return len(self.relations)

    @property
    def num_summaries(self) -> int:
        return len(self.summaries)

    def to(self, device) -> "GragParts":
        t = {k: getattr(self, k).to(device) for k in (*_INT, "summary_emb")}
        return GragParts(relations=self.relations, summaries=self.summaries, meta=dict(self.meta), **t)

    # ------------------------------------------------------------ derived graph
    def adjacency(self, num_entities: int) -> tuple[Tensor, Tensor]:
        """Symmetric CSR ``(crow [N + 1], col [nnz])`` of the summary-augmented graph,
        N = V + C, no self loops, one entry per node pair."""
        v, c = num_entities, self.num_summaries
        n = v + c
        member_row = torch.repeat_interleave(torch.arange(c, device=self.summary_col.device) + v,
                                             self.summary_crow.diff())
        src = torch.cat([self.triple_head, self.triple_tail, member_row, self.summary_col])
        dst = torch.cat([self.triple_tail, self.triple_head, self.summary_col, member_row])
        keep = src != dst
        key = torch.unique(src[keep] * n + dst[keep])  # sorted: rows in order
        row, col = key // n, key % n
        crow = torch.zeros(n + 1, dtype=torch.int64, device=key.device)
        crow[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
        return crow, col

    def node_passages(self, num_entities: int, fact_passage: Tensor, num_passages: int) -> tuple[Tensor, Tensor]:
        """CSR ``(crow [N + 1], col)`` of each node's passages (entity: its triples' passages;
        summary: its members'), one entry per (node, passage)."""
        v, c = num_entities, self.num_summaries
        n = v + c
        p = max(num_passages, 1)
        tp = fact_passage[self.triple_fact]
        ent = torch.cat([self.triple_head, self.triple_tail])
        pas = torch.cat([tp, tp])
        # a summary's passages: its members' (each triple endpoint's passage, through its community)
        comm = self.community[ent]
        has = comm >= 0
        node = torch.cat([ent, comm[has] + v])
        pas = torch.cat([pas, pas[has]])
        key = torch.unique(node * p + pas)
        row, col = key // p, key % p
        crow = torch.zeros(n + 1, dtype=torch.int64, device=key.device)
        crow[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
        return crow, col

    def node_emb(self, entity_emb: Tensor, fact_emb: Tensor) -> Tensor:
        """float ``[V + C, D]`` L2-normalised node embeddings (module docstring)."""
        v = entity_emb.shape[0]
        ent = torch.cat([self.triple_head, self.triple_tail])
        facts = torch.cat([self.triple_fact, self.triple_fact])
        total = torch.zeros_like(entity_emb, dtype=torch.float32).index_add_(0, ent, fact_emb[facts].float())
        count = torch.bincount(ent, minlength=v).clamp_min(1).unsqueeze(1).float()
        out = entity_emb.float() + torch.where(count > 0, total / count, total)
        out = torch.nn.functional.normalize(out, dim=1)
        return torch.cat([out.to(entity_emb.dtype), self.summary_emb.to(entity_emb.dtype)])

    def is_graph_node(self, num_entities: int) -> Tensor:
        """bool ``[V + C]``: entities in at least one triple, and every summary node."""
        v = num_entities
        out = torch.zeros(v + self.num_summaries, dtype=torch.bool, device=self.community.device)
        out[self.triple_head] = True
        out[self.triple_tail] = True
        out[v:] = True
        return out

    # ---------------------------------------------------------------------- I/O
    def save(self, folder: Path) -> None:
        """Write ``grag.json`` and ``grag.safetensors`` into ``folder`` (the index's temporary
        folder during :meth:`Index.save`)."""
        from hpengine.graph._mmap import write_safetensors

        tensors = {k: getattr(self, k).detach().contiguous().cpu() for k in (*_INT, "summary_emb")}
        write_safetensors(tensors, Path(folder) / GRAG_TENSORS)  # durable, created exclusively (an OSError when the disk is full)
        meta = {"format_version": GRAG_FORMAT_VERSION, "relations": self.relations, "summaries": self.summaries,
                **{k: v for k, v in self.meta.items() if k not in ("relations", "summaries", "format_version")}}
        write_json_durable(Path(folder) / GRAG_META, meta)

    @classmethod
    def load(cls, folder: Path, *, device, num_facts: int, num_entities: int, dim: int,
             root: Path | None = None) -> "GragParts":
        """Read and validate the parts (ids in range, lengths agree, finite embeddings).

        Raises:
            IndexFormatError: naming the file found wrong.
        """
        from hpengine.graph._mmap import read_safetensors
        from hpengine.graph._store import IndexFormatError, read_json

        folder = Path(folder)
        meta_path, tensor_path = folder / GRAG_META, folder / GRAG_TENSORS
        meta = read_json(meta_path, root)
        if not isinstance(meta, dict) or meta.get("format_version") != GRAG_FORMAT_VERSION:
            got = meta.get("format_version") if isinstance(meta, dict) else type(meta).__name__
            raise IndexFormatError(f"{meta_path}: GRAG format version {got!r} is not supported (expected "
                                   f"{GRAG_FORMAT_VERSION}); rebuild them with `hpengine grag-build INDEX`")
        for key in ("relations", "summaries"):
            if not isinstance(meta.get(key), list) or not all(isinstance(x, str) for x in meta[key]):
                raise IndexFormatError(f"{meta_path}: {key!r} must be a list of str")
        try:
            t = {k: v.to(torch.device(device)) for k, v in read_safetensors(tensor_path, root).items()}
        except FileNotFoundError as exc:
            raise IndexFormatError(f"{tensor_path} is missing; rebuild the parts with `hpengine grag-build INDEX`") from exc
        for k in (*_INT, "summary_emb"):
            if k not in t:
                raise IndexFormatError(f"{tensor_path}: missing tensor {k!r}")
            if k in _INT and (t[k].dtype != torch.int64 or t[k].dim() != 1):
                raise IndexFormatError(f"{tensor_path}: tensor {k} must be 1-d int64 (got {t[k].dtype}, "
                                       f"{tuple(t[k].shape)})")
        nt, c = len(meta["relations"]), len(meta["summaries"])
        checks = [
            ("triple_head/tail/fact have one entry per relation", all(t[k].numel() == nt for k in _INT[:3])),
            ("community has one entry per entity", t["community"].numel() == num_entities),
            ("summary_crow has C + 1 entries", t["summary_crow"].numel() == c + 1),
            ("summary_emb is [C, D]", tuple(t["summary_emb"].shape) == (c, dim) or (c == 0 and t["summary_emb"].numel() == 0)),
            ("entity ids in range", all(not t[k].numel() or (int(t[k].min()) >= 0 and int(t[k].max()) < num_entities)
                                        for k in ("triple_head", "triple_tail", "summary_col"))),
            ("fact ids in range", not nt or (int(t["triple_fact"].min()) >= 0 and int(t["triple_fact"].max()) < num_facts)),
            ("community ids in range", not num_entities or (int(t["community"].min()) >= -1
                                                            and int(t["community"].max()) < c)),
            ("summary_crow ends at len(summary_col)", int(t["summary_crow"][-1]) == t["summary_col"].numel()),
            ("finite summary embeddings", bool(torch.isfinite(t["summary_emb"]).all())),
        ]
        for what, ok in checks:
            if not ok:
                raise IndexFormatError(f"{tensor_path}: expected {what}; the GRAG files do not belong to this "
                                       f"index (rebuild them with `hpengine grag-build INDEX`)")
        if c == 0:
            t["summary_emb"] = t["summary_emb"].reshape(0, dim)
        extra = {k: v for k, v in meta.items() if k not in ("relations", "summaries", "format_version")}
        return cls(relations=meta["relations"], summaries=meta["summaries"], meta=extra, **t)


def has_grag_files(folder) -> bool:
    """``folder`` has GRAG-MH's parts (an entry there that is a link is refused, not followed)."""
    from hpengine.graph._files import check_entry

    path = Path(folder) / GRAG_META
    check_entry(path, folder=False)
    return path.is_file()


# ---------------------------------------------------------------------------- build
def louvain_communities(head: Tensor, tail: Tensor, *, seed: int = 0, resolution: float = 1.0) -> list:
    """Louvain communities (networkx) of the entity graph of the triples, weight = triples per
    pair; deterministic for a fixed ``seed`` (nodes and edges are added in sorted order).
    Returns communities as sorted entity-id lists, ordered by their smallest id."""
    import networkx as nx

    pairs = torch.stack([torch.minimum(head, tail), torch.maximum(head, tail)], 1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if not pairs.numel():
        return []
    key, count = torch.unique(pairs, dim=0, return_counts=True)
    g = nx.Graph()
    g.add_nodes_from(sorted(set(key.reshape(-1).tolist())))
    g.add_weighted_edges_from((a, b, w) for (a, b), w in zip(key.tolist(), count.tolist()))
    comms = nx.community.louvain_communities(g, weight="weight", resolution=resolution, seed=seed)
    return sorted((sorted(c) for c in comms), key=lambda c: c[0])


def extractive_summaries(communities: list, head: Tensor, tail: Tensor, fact: Tensor, facts: list,
                         entities: list, *, token_budget: int = 80, names: int = 5) -> tuple[list, list]:
    """One summary per community without a model: up to ``names`` member names (by weighted
    degree in the community), then its most central facts (a fact's centrality: the summed
    in-community degree of its triples' member endpoints; ties by fact id) until ``token_budget``
    whitespace tokens (at least one fact). Returns ``(summaries, fact groups)``; a group (the
    chosen facts, central first) is what an abstractive summarizer gets."""
    degree: dict = {}
    for h, t in zip(head.tolist(), tail.tolist()):
        if h != t:
            degree[h] = degree.get(h, 0) + 1
            degree[t] = degree.get(t, 0) + 1
    owner = {e: ci for ci, c in enumerate(communities) for e in c}
    central: list = [dict() for _ in communities]
    for h, t, f in zip(head.tolist(), tail.tolist(), fact.tolist()):
        for e in (h, t):
            ci = owner.get(e)
            if ci is not None:
                central[ci][f] = central[ci].get(f, 0) + degree.get(e, 0)
    summaries, groups = [], []
    for ci, members in enumerate(communities):
        top = sorted(members, key=lambda e: (-degree.get(e, 0), e))[:names]
        chosen, used = [], 0
        for f in sorted(central[ci], key=lambda f: (-central[ci][f], f)):
            n = len(facts[f].split())
            if chosen and used + n > token_budget:
                break
            chosen.append(facts[f])
            used += n
        groups.append(chosen)
        summaries.append(", ".join(entities[e] for e in top) + ": " + " ".join(chosen))
    return summaries, groups


def build_grag_parts(head: Tensor, tail: Tensor, fact: Tensor, relations: list, *, facts: list, entities: list,
                     encoder, summarize=None, seed: int = 0, resolution: float = 1.0, min_community: int = 2,
                     token_budget: int = 80, names: int = 5, timer: dict | None = None) -> GragParts:
    """Communities, summary nodes and their embeddings from triples (ids into the index).

    Args:
        head, tail, fact: int64 ``[T]`` triples; relations: ``T`` phrases.
        facts, entities: the index's texts.
        encoder: the index's encoder (``encode(list) -> [n, D]``).
        summarize: ``fact groups -> summaries`` (an abstractive model); None: extractive.
        seed, resolution: Louvain; min_community: smallest community given a summary node.
        token_budget, names: extractive summaries (:func:`extractive_summaries`).
        timer: when given, seconds per stage are written into it.
    """
    import time

    timer = {} if timer is None else timer
    t0 = time.perf_counter()
    comms = [c for c in louvain_communities(head, tail, seed=seed, resolution=resolution) if len(c) >= min_community]
    timer["communities"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    summaries, groups = extractive_summaries(comms, head, tail, fact, facts, entities, token_budget=token_budget,
                                             names=names)
    if summarize is not None and comms:
        summaries = list(summarize(groups))
    timer["summaries"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    v = len(entities)
    community = torch.full((v,), -1, dtype=torch.int64)
    col = torch.tensor([e for c in comms for e in c], dtype=torch.int64)
    crow = torch.zeros(len(comms) + 1, dtype=torch.int64)
    crow[1:] = torch.cumsum(torch.tensor([len(c) for c in comms], dtype=torch.int64), 0)
    community[col] = torch.repeat_interleave(torch.arange(len(comms)), crow.diff())
    emb = encoder.encode(summaries) if summaries else None
    dim = getattr(encoder, "dim", None)
    summary_emb = emb.float().cpu() if emb is not None else torch.zeros(0, int(dim) if dim else 0)
    timer["embed_summaries"] = time.perf_counter() - t0
    return GragParts(head.cpu(), tail.cpu(), fact.cpu(), list(relations), community, crow, col, summaries,
                     torch.nn.functional.normalize(summary_emb, dim=1) if summary_emb.numel() else summary_emb)
