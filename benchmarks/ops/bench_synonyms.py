"""Synonym search (docs/methods/index.md#synonyms): exact (tiled torch matmul + topk, FAISS
IndexFlatIP) vs approximate (``backend="nndescent"``: pynndescent's k-NN graph, candidates re-scored
exactly) vs FAISS HNSW and IVF vs HippoRAG's own all-pairs KNN.

Every (implementation, V) case runs in its own subprocess, so that peak RSS (``ru_maxrss``) belongs
to that case alone; "extra MiB" is peak RSS minus the RSS after the embeddings were loaded, i.e. the
search's own working set. A case is one timed call (wall and process CPU seconds) after a small
warm-up (its seconds are reported: for nndescent they are numba's one-off compilation); the rows are harness ``Record`` s, so ``python -m benchmarks compare`` works
as for the other op benchmarks.

Implementations (``grid=IMPL:V,IMPL:V,...``):
  torch     synonym_pairs(backend="torch"): exact, the reference (what "auto" runs up to 100k keys)
  faiss     synonym_pairs(backend="faiss"): exact, IndexFlatIP
  nndescent synonym_pairs(backend="nndescent", ann_neighbors=ann_neighbors): approximate (what
            "auto" runs above 100k keys)
  hnsw      (an alternative measured for the choice) FAISS IndexHNSWFlat, inner product, M hnsw_m=,
            efConstruction ef_construction=, efSearch ef_search=, built on threads=; top-17 per
            name (its distances are exact), then threshold and cap as above
  ivfflat   (an alternative measured for the choice) FAISS IndexIVFFlat (names // cell_size= lists,
            k-means 5 iterations on 16 names per list), nprobe= lists searched per name; top-17,
            threshold, cap
  hipporag  HippoRAG's retrieve_knn (src/hipporag/utils/embed_utils.py, loaded from hipporag_src=:
            query batches of 1000 x key batches of 10000, top-2047 per name) followed by the loop of
            HippoRAG.add_synonymy_edges (keep neighbours with score >= eta, at most 101 per name,
            names with more than 2 alphanumerics), as HippoRAG builds its synonymy edges.
All search all names against all names, threshold 0.8, at most 16 per name (HippoRAG: 101), self
pairs excluded.

Recall (approximate rows): pairs found / exact pairs, on ``recall_queries=`` random query names whose exact
neighbours are computed by brute force for just those queries (exact search over all V names), and
over all names where V <= full_recall_max= (the exact all-pairs result, computed untimed).

Data (``data=``):
  minilm     real all-MiniLM-L6-v2 embeddings (hpengine's "minilm" encoder, fp32, unit norm) of
             entity-like names: the titles and capitalised phrases of the three dev corpora without
             digits (~119k) plus surface variants of them ("J. Smith", "Smith", lower case,
             "the X", "X (film)", ...) up to the largest V; encoded once into minilm_cache=
             (~15-20 min for 200k names on 2 cores), the first V of one shuffled list per case.
  index      the names of a built index (index=; e.g. bench_scale.py's 100k index: 424k MiniLM
             names of the amplified corpus), V of them sampled with a fixed seed.
  synthetic  random unit vectors calibrated on MuSiQue's entity-name embeddings (mean cosine 0.16,
             std 0.10, ~0.5 pairs >= 0.8 per name, 25% of names with any, PCA-64 variance 0.59):
             a common direction, topics, an anisotropic spectrum, Zipf-sized families of variants.

    # the recorded run (benchmarks/analysis/EXPERIMENTS.md), one thread:
    git clone https://github.com/OSU-NLP-Group/HippoRAG /tmp/HippoRAG   # c617143 was timed
    python -m benchmarks ops bench_synonyms data=minilm threads=1 \\
        hipporag_src=/tmp/HippoRAG/src/hipporag/utils/embed_utils.py \\
        grid=torch:10000,torch:20000,torch:40000,torch:80000,hipporag:10000,hipporag:20000,hipporag:40000,\\
nndescent:20000,nndescent:80000,nndescent:200000,hnsw:20000,hnsw:200000,ivfflat:20000,ivfflat:200000
    python -m benchmarks ops bench_synonyms grid=torch:5000,nndescent:5000,faiss:5000   # quick look
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._harness import Common, Record, as_words, opt, report, script_args, time_once

IMPLS = ("torch", "faiss", "nndescent", "hnsw", "ivfflat", "hipporag")
APPROXIMATE = ("nndescent", "hnsw", "ivfflat")
ROOT = Path(__file__).resolve().parents[2]
_PHRASE = re.compile(r"[A-Z][\w'\-]*(?:\s+(?:(?:of|the|de|von|van|and|for|la|le|del|da|du)\s+)?[A-Z][\w'\-]*)*")
_QUALIFIERS = ("film", "band", "album", "writer", "politician", "river", "town", "company")


# --- data -----------------------------------------------------------------------------------

def make_synthetic(num: int, dim: int = 384, seed: int = 0):
    """``[num, dim]`` float32 unit vectors with the statistics of MuSiQue's entity-name embeddings.

    A common direction (mean cosine ~0.16), topics of ~300 names, anisotropic noise (variance
    decaying as i^-0.8 over a random basis) and families of variants: Zipf(2.8) sizes up to 40,
    each variant at cosine U(0.62, 0.95) to its family root, so pairs fall on both sides of 0.8.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(dim, dim, generator=gen))[0]
    scale = torch.arange(1, dim + 1, dtype=torch.float) ** -0.4
    scale = scale / scale.pow(2).mean().sqrt()

    def noise(n):  # E|g|^2 = 1
        return (torch.randn(n, dim, generator=gen) * scale / dim**0.5) @ basis.T

    weights = torch.arange(1, 41, dtype=torch.float) ** -2.8
    sizes = torch.multinomial(weights, num, replacement=True, generator=gen) + 1
    sizes = sizes[:int((sizes.cumsum(0) < num).sum()) + 1]
    sizes[-1] -= int(sizes.sum()) - num
    num_roots = sizes.numel()
    common = torch.nn.functional.normalize(torch.randn(1, dim, generator=gen), dim=1)
    topics = torch.nn.functional.normalize(torch.randn(max(1, num // 300), dim, generator=gen), dim=1)
    topic = torch.randint(0, topics.shape[0], (num_roots,), generator=gen)
    root = torch.nn.functional.normalize(0.5 * common + 0.45 * topics[topic] + noise(num_roots), dim=1)
    owner = torch.repeat_interleave(torch.arange(num_roots), sizes)
    cos = 0.62 + 0.33 * torch.rand(num, generator=gen)
    g = noise(num)
    g = torch.nn.functional.normalize(g - (g * root[owner]).sum(1, keepdim=True) * root[owner], dim=1)
    emb = cos[:, None] * root[owner] + (1 - cos[:, None] ** 2).sqrt() * g
    first = torch.cumsum(sizes, 0) - sizes
    emb[first] = root
    return emb[torch.randperm(num, generator=gen)].contiguous()


def corpus_names(data_dir: Path) -> list:
    """Titles and capitalised phrases of the three dev corpora, without digits (as the index build
    leaves names with digits out of the synonym search)."""
    names = set()
    for name in ("2wikimultihopqa", "hotpotqa", "musique"):
        for passage in json.loads((data_dir / name / "corpus.json").read_text()):
            names.add(passage["title"].strip())
            names.update(m.group(0) for m in _PHRASE.finditer(passage["text"]))
    return sorted(n for n in names if 1 < len(n) < 80 and not any(c.isdigit() for c in n))


def _variants(name: str, rng: random.Random) -> list:
    words = name.split()
    out = []
    if len(words) >= 2:
        out += [f"{words[0][0]}. {' '.join(words[1:])}", " ".join(words[1:]), " ".join(words[:-1])]
    out.append(name.lower())
    out.append(name[4:] if name.startswith("The ") else f"the {name}")
    out.append(f"{name} ({rng.choice(_QUALIFIERS)})")
    return out


def make_names(num: int, data_dir: Path, seed: int = 0) -> list:
    """``num`` distinct names: the corpus names plus variants of random ones, shuffled."""
    rng = random.Random(seed)
    pool = corpus_names(data_dir)
    names = set(pool)
    while len(names) < num:
        names.update(_variants(rng.choice(pool), rng))
    names = sorted(names)
    rng.shuffle(names)
    return names[:num]


def load_minilm(num: int, cache: Path, data_dir: Path):
    """(names, float32 ``[num, 384]`` embeddings): the first ``num`` of the cached list, encoding
    it first if the cache is missing or shorter."""
    import torch

    if cache.exists():
        data = torch.load(cache)
        if len(data["names"]) >= num:
            return data["names"][:num], data["emb"][:num]
    from sentence_transformers import SentenceTransformer

    from hpengine.models import resolve_model_path

    names = make_names(num, data_dir)
    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    emb = model.encode(names, batch_size=256, normalize_embeddings=True, convert_to_tensor=True,
                       show_progress_bar=False).float().contiguous()
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"names": names, "emb": emb}, cache)
    return names, emb


def load_index_names(num: int, index: str, seed: int = 0):
    """``num`` names of a built index (their stored embeddings as float32), a seeded random sample."""
    import torch

    from hpengine.graph import Index

    built = Index.load(index)
    take = torch.randperm(built.num_entities, generator=torch.Generator().manual_seed(seed))[:num]
    return [built.entities[i] for i in take.tolist()], built.entity_emb[take].float().contiguous()


def load_data(args, num: int):
    if args.data == "synthetic":
        return None, make_synthetic(num)
    if args.data == "index":
        return load_index_names(num, args.index)
    return load_minilm(num, Path(args.minilm_cache), Path(args.data_dir))


# --- one case, in its own process -------------------------------------------------------------

def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def hipporag_synonymy(retrieve_knn, names, emb, threshold: float) -> int:
    """HippoRAG's synonymy edges: ``retrieve_knn`` over all names, then add_synonymy_edges' loop
    (HippoRAG.py at c617143: neighbours in decreasing score while score >= threshold, at most 101,
    the node itself skipped, only names with more than 2 alphanumerics). The number of edges."""
    ids = [f"entity-{hashlib.md5(n.encode()).hexdigest()}" for n in names]  # compute_mdhash_id
    vecs = emb.numpy()  # the embedding store returns numpy rows
    knn = retrieve_knn(query_ids=ids, key_ids=ids, query_vecs=vecs, key_vecs=vecs, k=2047,
                       query_batch_size=1000, key_batch_size=10000)
    content = dict(zip(ids, names))
    edges = {}
    for node, (nns, scores) in knn.items():
        if len(re.sub("[^A-Za-z0-9]", "", content[node])) <= 2:
            continue
        kept = 0
        for nn, score in zip(nns, scores):
            if score < threshold or kept > 100:
                break
            if nn != node and content[nn] != "":
                edges[(node, nn)] = score
                kept += 1
    return len(edges)


def _load_retrieve_knn(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("hipporag_embed_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.retrieve_knn


def faiss_index_pairs(kind: str, emb, threshold: float, k: int, args):
    """All-pairs search with a plain FAISS approximate index (hnsw | ivfflat): ``[2, n]`` pairs."""
    import faiss
    import torch

    x = emb.numpy()
    num, dim = x.shape
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, args.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = args.ef_construction
        index.add(x)
        index.hnsw.efSearch = args.ef_search
    else:
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, max(1, num // args.cell_size), faiss.METRIC_INNER_PRODUCT)
        index.cp.niter, index.cp.max_points_per_centroid, index.cp.min_points_per_centroid = 5, 16, 1
        index.train(x)
        index.add(x)
        index.nprobe = args.nprobe
    sim, key = (torch.from_numpy(a) for a in index.search(x, k + 1))
    is_dropped = (key < 0) | (key == torch.arange(num)[:, None]) | (sim < threshold)
    sim = sim.masked_fill(is_dropped, float("-inf"))
    sim, pos = sim.topk(k, dim=1)
    row, col = (sim > float("-inf")).nonzero(as_tuple=True)
    return torch.stack([row, key.gather(1, pos)[row, col]])


def _exact_sample(emb, qids, threshold: float, k: int) -> set:
    """Exact (query, key) pairs of the sampled queries: brute force over all keys."""
    from hpengine.graph import synonym_pairs

    pairs = synonym_pairs(emb[qids], emb, threshold=threshold, max_per_entity=k + 1, exclude_self=False,
                          backend="torch")
    pairs = pairs[:, qids[pairs[0]] != pairs[1]]
    out, count = set(), {}
    for q, key in pairs.t().tolist():  # already sorted by decreasing similarity per query
        if count.get(q, 0) < k:
            out.add((int(qids[q]), key))
            count[q] = count.get(q, 0) + 1
    return out


def run_case(impl: str, num: int, args) -> dict:
    """One measurement (called in a fresh subprocess)."""
    import torch

    from hpengine.graph import synonym_pairs

    if args.threads:
        torch.set_num_threads(args.threads)
        import faiss

        faiss.omp_set_num_threads(args.threads)
    names, emb = load_data(args, num)
    if names is None:
        names = [f"synthetic name {i}" for i in range(num)]  # distinct, and each passes HippoRAG's length filter
    kwargs = dict(threshold=args.threshold, max_per_entity=args.k, block_size=args.block_size)
    if impl == "hipporag":
        retrieve_knn = _load_retrieve_knn(args.hipporag_src)
        search = lambda: hipporag_synonymy(retrieve_knn, names, emb, args.threshold)  # noqa: E731
        warm_up = lambda: hipporag_synonymy(retrieve_knn, names[:1024], emb[:1024], args.threshold)  # noqa: E731
    elif impl in ("hnsw", "ivfflat"):
        search = lambda: faiss_index_pairs(impl, emb, args.threshold, args.k, args)  # noqa: E731
        warm_up = lambda: faiss_index_pairs(impl, emb[:1024], args.threshold, args.k, args)  # noqa: E731
    else:
        kwargs.update(backend=impl, ann_neighbors=args.ann_neighbors, ann_dims=args.ann_dims)
        search = lambda: synonym_pairs(emb, emb, **kwargs)  # noqa: E731
        warm_up = lambda: (synonym_pairs(emb[:1024], emb[:1024], **kwargs),  # noqa: E731
                           synonym_pairs(emb[:256].clone(), emb[:1024], **kwargs))
    warm_up_seconds = time_once(warm_up)
    base = _rss_mib()
    found, cpu = {}, time.process_time()
    seconds = time_once(lambda: found.setdefault("pairs", search()))
    pairs, cpu = found["pairs"], time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = {"impl": impl, "V": num, "D": emb.shape[1], "data": args.data, "seconds": seconds, "cpu_seconds": cpu,
           "peak_rss_mib": peak, "extra_mib": peak - base, "threads": torch.get_num_threads(),
           "pairs": pairs if isinstance(pairs, int) else int(pairs.shape[1]), "warm_up_seconds": warm_up_seconds}
    row.update({"nndescent": dict(ann_neighbors=args.ann_neighbors, ann_dims=args.ann_dims), "ivfflat": dict(cell_size=args.cell_size,
                nprobe=args.nprobe), "hnsw": dict(hnsw_m=args.hnsw_m, ef_construction=args.ef_construction,
                                                  ef_search=args.ef_search)}.get(impl, {}))
    if impl in APPROXIMATE:
        got = set(map(tuple, pairs.t().tolist()))
        qids = torch.randperm(num, generator=torch.Generator().manual_seed(1))[:args.recall_queries]
        ref = _exact_sample(emb, qids, args.threshold, args.k)
        sampled = set(qids.tolist())
        found = {p for p in got if p[0] in sampled}
        row.update(recall_sample=len(found & ref) / max(1, len(ref)), sample_pairs=len(ref),
                   sample_extra=len(found - ref))
        if num <= args.full_recall_max:
            exact = synonym_pairs(emb, emb, threshold=args.threshold, max_per_entity=args.k, backend="torch")
            exact = set(map(tuple, exact.t().tolist()))
            row.update(recall=len(got & exact) / max(1, len(exact)), exact_pairs=len(exact),
                       is_subset=got <= exact)
    return row


def _spawn(impl: str, num: int, args) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.ops.bench_synonyms", f"worker={impl}", f"grid={impl}:{num}",
           *as_words(args, skip=("worker", "grid", "out", "profile"))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- report -----------------------------------------------------------------------------------

def print_table(rows: list[dict]) -> None:
    exact_s = {r["V"]: r["seconds"] for r in rows if r["impl"] == "torch"}
    print(f"{'V':>8} {'impl':>9} {'seconds':>9} {'cpu s':>8} {'extra MiB':>10} {'pairs':>8} {'recall':>8} "
          f"{'recall@2k':>10} {'time / torch':>13}")
    for r in rows:
        ratio = r["seconds"] / exact_s[r["V"]] if r["V"] in exact_s else float("nan")
        recall = f"{r['recall']:.4f}" if "recall" in r else "-"
        sampled = f"{r['recall_sample']:.4f}" if "recall_sample" in r else "-"
        print(f"{r['V']:>8} {r['impl']:>9} {r['seconds']:>9.2f} {r['cpu_seconds']:>8.2f} {r['extra_mib']:>10.0f} "
              f"{r['pairs']:>8} {recall:>8} {sampled:>10} {ratio:>13.2f}")
    for impl in IMPLS:  # time growth: each size against the smallest of that implementation
        mine = sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["V"])
        if len(mine) > 1:
            first = mine[0]
            growth = ", ".join(f"{r['V'] / first['V']:.0f}x names: {r['seconds'] / first['seconds']:.1f}x wall "
                               f"({r['cpu_seconds'] / first['cpu_seconds']:.1f}x cpu)" for r in mine[1:])
            print(f"{impl} from {first['V']}: {growth}")


def to_record(row: dict):
    """A worker's row as a harness :class:`~benchmarks._harness.Record` (items: names; peak: the search's own MiB)."""
    extra = {k: v for k, v in row.items() if k not in ("impl", "V", "D", "seconds", "extra_mib")}
    return Record("synonyms", row["impl"], {"V": row["V"], "D": row["D"], "data": row["data"]}, row["seconds"],
                  row["V"], 1, row["extra_mib"], extra)


def _parse_grid(items: list) -> list:
    cases = []
    for item in items:
        impl, _, size = item.partition(":")
        if impl not in IMPLS or not size.isdigit():
            raise ValueError(f"grid= takes IMPL:V,... with IMPL one of {list(IMPLS)} (got {item!r})")
        cases.append((impl, int(size)))
    return cases


@dataclass
class Config(Common):
    grid: tuple[str, ...] = opt(("torch:5000", "faiss:5000"), "IMPL:V cases (V names; nndescent compiles for a minute first)")
    data: str = opt("synthetic", "minilm, synthetic or index")
    index: str = opt("", "data=index: a built index whose names (stored embeddings) are sampled")
    data_dir: str = opt(str(ROOT.parent / "shared" / "data"), "the dev corpora (minilm)")
    minilm_cache: str = opt(str(Path.home() / ".cache" / "hpengine" / "bench_synonyms_minilm.pt"),
                            "where data=minilm's encoded names are cached")
    hipporag_src: str = opt("", "HippoRAG's src/hipporag/utils/embed_utils.py (for impl hipporag)")
    block_size: int = opt(2048, "names per block of the exact search")
    threshold: float = opt(0.8, "cosine threshold of a synonym pair")
    k: int = opt(16, "pairs kept per name")
    ann_neighbors: int = opt(24, "nndescent: candidates per name")
    ann_dims: int = opt(0, "nndescent: dimensions searched (synonym_pairs' ann_dims; 0: by size)")
    cell_size: int = opt(128, "ivfflat: names per list")
    nprobe: int = opt(8, "ivfflat: lists searched per name")
    hnsw_m: int = opt(32, "hnsw: graph degree M")
    ef_construction: int = opt(80, "hnsw: build beam")
    ef_search: int = opt(64, "hnsw: search beam")
    recall_queries: int = opt(2000, "names whose pairs are checked against the exact search")
    full_recall_max: int = opt(40_000, "largest V whose recall is checked over all names")
    worker: str = opt("", "internal: run one case in this process (a worker)")


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    if args.data not in ("minilm", "synthetic", "index"):
        print(f"hpengine: error: data= takes minilm, synthetic or index (got {args.data!r})", file=sys.stderr)
        return 2
    try:
        cases = _parse_grid(args.grid)
    except ValueError as e:
        print(f"hpengine: error: {e}", file=sys.stderr)
        return 2
    if args.worker:
        print(json.dumps(run_case(args.worker, cases[0][1], args)))
        return 0
    if any(impl == "hipporag" for impl, _ in cases) and not args.hipporag_src:
        print("hpengine: error: impl hipporag needs hipporag_src=PATH/src/hipporag/utils/embed_utils.py", file=sys.stderr)
        return 2
    rows = []
    for impl, num in cases:
        rows.append(_spawn(impl, num, args))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print_table(rows)
    report(__file__, args, [to_record(r) for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
