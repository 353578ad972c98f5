"""The engine stages at a size too large to extract and encode on this CPU: a built index amplified
at the structure level, its build stages (synonyms, save) timed in this process and its reader
stages (load, structure, the question mix) in a fresh one, each stage with its own peak RSS.

    python -m benchmarks e2e amplify_index --index /work/scale/index_100000 --copies 10 \
        --work-dir /work/scale --label engine_1m
    python -m benchmarks e2e amplify_index --index /work/scale/index_10000 --copies 10 --work-dir /tmp/a  # 100k
    python -m benchmarks e2e amplify_index --serve /work/scale/index_x10   # reader stages of a kept index

Amplification (:func:`amplify`): ``copies`` copies of every passage, fact and entity. Copy 0 is the
index itself; copy ``j >= 1`` renames every entity (``name ~t``, ``t`` the copy's tag in letters)
and retitles every passage (``title ~t``, so a name still finds the passage titled with it), keeps
the fact and passage texts, remaps its incidences to copy j's facts, entities and passages, and
takes as embeddings the originals turned by one rotation ``Q_j`` near the identity (the same for
facts, names and passages; :func:`near_rotation`). A rotation keeps every similarity inside a copy,
so each copy has the original's synonym pairs, links and question geometry, while a name and its
variant in another copy are near but below a usual threshold (cosine about ``--variant-cosine``,
0.65 by default: MiniLM names 0.59-0.72 at 0.65, none above η = 0.8). The synonym search thus has
a real corpus's work to do (every name has ``copies - 1`` close variants to pass over), and the
synonym pairs, the expanded incidences and the graph grow with the copies as a real corpus's would,
not faster. It differs from a real corpus of that size in its texts (each repeated ``copies``
times) and its name statistics (every name occurs ``copies`` times, in the same contexts).
Questions are the dev mix of ``bench_scale.py``; their gold passages are copy 0's.

Stages: ``amplify`` (the copies), ``synonyms`` (the build's search over all names:
``graph.entity_synonyms`` with the index's settings, its backend chosen by size), ``save``
(``Index.save``: what a build writes), then in a fresh process, as a serving process would:
``load`` (``Index.load``, memory-mapped), ``structure`` (the loaded index's expanded incidence and
transition operator, which its readers derive), then each method on ``--questions`` questions
(``hpengine.jobs.evaluate``). Each stage's own peak RSS (the high-water mark reset before it, Linux
``/proc/self/clear_refs``; the process's high-water mark so far elsewhere), in which the pages of
the memory-mapped embeddings count once a stage touches them, and its peak private RSS (sampled
``RssAnon``: what the process itself holds; mapped pages are the page cache's, dropped under
pressure and read again). ``--dtype float16`` stores the copies'
embeddings in half precision (half the memory; the retrieval ops accept it).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

from benchmarks._harness import Record, add_common_args, finish, write_json  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _reset_peak() -> bool:
    """Reset the process's resident high-water mark (Linux: ``5 > /proc/self/clear_refs``), so the
    next :func:`_peak_mib` is one stage's own peak; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_mib(field: str) -> float | None:
    """A ``kB`` field of ``/proc/self/status`` in MiB (None where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_mib() -> float:
    """Peak RSS in MiB since the last reset (``VmHWM``), else the process's high-water mark."""
    peak = _status_mib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if peak is None else peak


def near_rotation(dim: int, cosine: float, generator: torch.Generator) -> torch.Tensor:
    """float64 ``[D, D]`` orthogonal ``Q = exp(θS)`` (``S`` a random skew-symmetric matrix) with
    ``trace(Q) / D = cosine``: for any unit ``x``, ``x·Qx`` concentrates about ``cosine`` (its
    eigenbasis is random)."""
    g = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
    skew = (g - g.T) / (2 * dim) ** 0.5
    freq = torch.linalg.eigvals(skew).imag.abs()  # trace(exp(θS)) / D = mean cos(θ freq)
    lo, hi = 0.0, torch.pi / float(freq.max())  # mean cos(θ freq) decreases on [0, hi]
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(torch.cos(mid * freq).mean()) > cosine else (lo, mid)
    return torch.linalg.matrix_exp(lo * skew)


def _rotated_copies(emb: torch.Tensor, rotations: list, dtype, rows: int = 1 << 16, path=None) -> torch.Tensor:
    """``[copies * N, D]`` in ``dtype``: ``emb`` then ``emb @ Qᵀ`` for each rotation, made in blocks
    of ``rows`` rows (the temporaries stay small). With ``path`` the result is a shared mapping of
    that file (``hpengine.graph.mapped_empty``), as the streaming build's merged rows are, and its
    pages are handed back to the kernel once written."""
    from hpengine.graph import mapped_empty

    n = emb.shape[0]
    shape = ((1 + len(rotations)) * n, emb.shape[1])
    out = torch.empty(shape, dtype=dtype) if path is None else mapped_empty(path, shape, dtype)
    out[:n] = emb.to(dtype)
    for j, rotation in enumerate(rotations, start=1):
        turn = rotation.T.float()
        for lo in range(0, n, rows):
            block = emb[lo:lo + rows].float() @ turn
            out[j * n + lo:j * n + lo + len(block)] = block.to(dtype)
    if path is not None:
        from hpengine.graph import page_out

        page_out(out)
        Path(path).unlink()  # the mapping stays while the tensor lives; the disk space goes with it
    return out


def _tag(j: int) -> str:
    """Copy ``j``'s name suffix in letters (``1 -> b``, ``26 -> ba``): a digit would take every
    renamed name out of the synonym search (``graph.synonym_skip_digits``)."""
    out = ""
    while True:
        j, r = divmod(j, 26)
        out = chr(ord("a") + r) + out
        if j == 0:
            return out


def amplify(index, copies: int, variant_cosine: float = 0.65, seed: int = 0, dtype=None, rows_dir=None):
    """The index with ``copies`` structure-level copies (module docstring); synonyms left empty
    (the caller searches them) and no GRAG parts. With ``rows_dir`` the fact and passage
    embeddings are shared file mappings there (paged out once written), as the streaming build's
    merged rows are; the entity embeddings, which the synonym search reads, stay in memory.

    Shapes:
        P, H, V passages, facts, entities -> copies * P, copies * H, copies * V; nnz_raw -> copies * nnz_raw.
    """
    from hpengine.graph import Index, Passage

    p, h, v = index.num_passages, index.num_facts, index.num_entities
    dtype = dtype or index.fact_emb.dtype
    suffix = [""] + [f" ~{_tag(j)}" for j in range(1, copies)]
    passages = [Passage(q.title + s, q.text) for s in suffix for q in index.passages]
    entities = [name + s for s in suffix for name in index.entities]
    raw = index.fact_entity_raw
    shifts = torch.arange(copies).repeat_interleave(raw.shape[1])
    fact_entity_raw = torch.stack([raw[0].repeat(copies) + shifts * h, raw[1].repeat(copies) + shifts * v])
    fact_passage = index.fact_passage.repeat(copies) + torch.arange(copies).repeat_interleave(h) * p
    gen = torch.Generator().manual_seed(seed)
    rotations = [near_rotation(index.fact_emb.shape[1], variant_cosine, gen) for _ in range(1, copies)]
    emb = {name: _rotated_copies(getattr(index, name), rotations, dtype,
                                 path=None if rows_dir is None or name == "entity_emb"
                                 else Path(rows_dir) / f"amplified-{name}.bin")
           for name in ("fact_emb", "entity_emb", "passage_emb") if getattr(index, name) is not None}
    meta = {k: val for k, val in index.meta.items() if k not in ("build_report", "add_reports")}
    meta["amplified"] = {"copies": copies, "variant_cosine": variant_cosine, "seed": seed, "from": {"passages": p, "facts": h,
                                                                                 "entities": v}}
    return Index(passages=passages, facts=list(index.facts) * copies, entities=entities, fact_passage=fact_passage,
                 fact_entity_raw=fact_entity_raw, synonyms=torch.zeros(2, 0, dtype=torch.int64),
                 fact_emb=emb["fact_emb"], entity_emb=emb["entity_emb"], passage_emb=emb.get("passage_emb"),
                 meta=meta)


def synonym_check(index, pairs: torch.Tensor, cfg, copies: int, sample: int = 2000, seed: int = 0,
                  rows: int = 1 << 15) -> dict:
    """The synonym search's pair recall on ``sample`` random eligible names (their exact pairs:
    every eligible name with cosine >= η, the ``synonym_max_per_entity`` nearest, by brute force),
    and how many pairs join different copies.

    Shapes:
        pairs ``[2, n]`` symmetric -> counts.
    """
    from hpengine.graph import synonym_eligible

    eligible = torch.nonzero(synonym_eligible(index.entities, cfg, "cpu")).squeeze(1)
    gen = torch.Generator().manual_seed(seed)
    queries = eligible[torch.randperm(len(eligible), generator=gen)[:sample]]
    q = index.entity_emb[queries].float()
    hits = []
    for lo in range(0, len(eligible), rows):
        keys = eligible[lo:lo + rows]
        sim = q @ index.entity_emb[keys].float().T
        sim[queries[:, None] == keys[None, :]] = -2.0
        row, col = (sim >= cfg.synonym_threshold).nonzero(as_tuple=True)
        hits.append(torch.stack([row.double(), keys[col].double(), sim[row, col].double()]))
    hits = torch.cat(hits, dim=1)
    exact = set()
    for i in range(len(queries)):
        mine = hits[:, hits[0] == i]
        top = mine[:, mine[2].argsort(descending=True)[:cfg.synonym_max_per_entity or None]]
        exact |= {(int(queries[i]), int(b)) for b in top[1].tolist()}
    mine = pairs[:, torch.isin(pairs[0], queries)]  # only the sampled names' pairs become Python tuples
    found = set(map(tuple, mine.t().tolist()))
    v = index.num_entities // copies
    return {"pairs": int(pairs.shape[1]), "cross_copy_pairs": int((pairs[0] // v != pairs[1] // v).sum()),
            "recall_sample_names": len(queries), "recall_exact_pairs": len(exact),
            "recall": round(len(exact & found) / max(1, len(exact)), 4)}


def graph_config(index):
    """The index's own synonym settings (its build config and η), backend by size."""
    from hpengine.jobs import built_graph_config

    return dataclasses.replace(built_graph_config(index.meta), synonym_backend="auto")


def _anon_mib() -> float:
    """Private (anonymous) resident MiB now: RSS without the pages of memory-mapped files, which
    the kernel can drop and read again (``RssAnon``; 0 where /proc has no such line)."""
    return _status_mib("RssAnon") or 0.0


class _AnonPeak:
    """The highest :func:`_anon_mib` seen while the ``with`` block runs (sampled every 0.1 s)."""

    def __enter__(self):
        import threading

        self.peak, self._done = _anon_mib(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._done.wait(0.1):
            self.peak = max(self.peak, _anon_mib())

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _anon_mib())


def _timer(stages: dict, rss: dict, anon: dict):
    """``timed(name, fn)``: runs ``fn``, records its seconds, its own peak RSS and its peak private
    (anonymous) RSS under ``name``."""
    def timed(name, fn):
        _reset_peak()
        start = time.perf_counter()
        with _AnonPeak() as sampled:
            out = fn()
        stages[name] = round(time.perf_counter() - start, 3)
        rss[name], anon[name] = round(_peak_mib(), 1), round(sampled.peak, 1)
        print(f"{name}: {stages[name]:.1f} s, peak RSS {rss[name]:,.0f} MiB (private {anon[name]:,.0f} MiB)",
              flush=True)
        return out

    return timed


def build_stages(args, timed) -> tuple[Path, dict]:
    """amplify, synonyms, save: what a build does; the saved folder and the synonym check."""
    from hpengine.graph import Index, entity_synonyms

    base = timed("load_base", lambda: Index.load(args.index, mmap=False))
    cfg = graph_config(base)
    if args.synonym_ann_dims is not None:
        cfg = dataclasses.replace(cfg, synonym_ann_dims=args.synonym_ann_dims)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    big = timed("amplify", lambda: amplify(base, args.copies, args.variant_cosine, args.seed,
                                           DTYPES.get(args.dtype), rows_dir=args.work_dir))
    del base
    big.synonyms = timed("synonyms", lambda: entity_synonyms(big.entity_emb, big.entities, cfg))
    checked = synonym_check(big, big.synonyms, cfg, args.copies, args.recall_queries, args.seed) if args.recall_queries else {}
    print(f"synonym search: {checked}", flush=True)
    out = Path(args.work_dir) / f"index_x{args.copies}"
    timed("save", lambda: big.save(out))
    return out, checked


def reader_stages(args, folder: Path, timed) -> dict:
    """load (memory-mapped), structure, the question mix: what a serving process does with the
    saved index."""
    from hpengine.config import EncoderConfig, EvalConfig, RetrievalConfig
    from hpengine.graph import Index
    from hpengine.jobs import evaluate
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine, get_retriever

    from benchmarks.e2e.bench_scale import WARMUP_QUESTIONS, question_mix

    index = timed("load", lambda: Index.load(folder))
    timed("structure", lambda: index.graph.transition())
    counts = {**index.summary(), "embedding_dtype": str(index.fact_emb.dtype)}
    print(f"index: {counts}", flush=True)
    encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path="", dtype=args.encoder_dtype))
    questions = question_mix(args.data_dir, args.questions, args.seed)
    methods = {}
    for method in args.methods:
        retrieval = RetrievalConfig(seed_backend=args.seed_backend)
        engine = Engine(index, encoder, retrieval, get_retriever(method).config_class())
        eval_cfg = EvalConfig(batch_size=args.batch_size, page_out=args.page_out)
        evaluate(engine, questions[:WARMUP_QUESTIONS], eval_cfg, progress=False)
        res = timed(f"query:{method}", lambda: evaluate(engine, questions, eval_cfg, progress=False))
        methods[method] = {k: res[k] for k in ("wall_seconds", "questions_per_second", "recall@5")}
        methods[method]["stage_seconds"] = res["seconds"]
        print(f"{method}: {methods[method]}", flush=True)
    return {"counts": counts, "methods": methods, "questions": len(questions), "page_out": args.page_out}


def _reader_process(args, folder: Path) -> dict:
    """:func:`reader_stages` in a fresh process, as a serving process would load the index (the
    build's freed Python objects would otherwise stay in this process's RSS)."""
    cmd = [sys.executable, __file__, "--serve", str(folder), "--data-dir", args.data_dir, "--questions",
           str(args.questions), "--batch-size", str(args.batch_size), "--encoder-dtype", args.encoder_dtype,
           "--seed", str(args.seed), "--threads", str(args.threads), "--seed-backend", args.seed_backend,
           "--json-line", "--page-out" if args.page_out else "--no-page-out", "--methods", *args.methods]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    lines = done.stdout.strip().splitlines()
    print("\n".join(lines[:-1]), flush=True)
    return json.loads(lines[-1])


def run(args) -> dict:
    stages, rss, anon = {}, {}, {}
    timed = _timer(stages, rss, anon)
    if args.serve:
        return {**reader_stages(args, Path(args.serve), timed), "index": args.serve, "seconds": stages,
                "peak_rss_mib": rss, "peak_private_mib": anon}
    out, checked = build_stages(args, timed)
    reader = _reader_process(args, out)
    stages.update(reader.pop("seconds"))
    rss.update(reader.pop("peak_rss_mib"))
    anon.update(reader.pop("peak_private_mib"))
    if not args.keep_index:
        import shutil

        shutil.rmtree(out, ignore_errors=True)
    return {"index": args.index, "copies": args.copies, "variant_cosine": args.variant_cosine, **reader,
            "synonyms": checked, "seconds": stages, "peak_rss_mib": rss, "peak_private_mib": anon,
            "loadavg_end": list(os.getloadavg())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", help="a built index (bench_scale.py --keep-indexes keeps them)")
    ap.add_argument("--serve", metavar="FOLDER",
                    help="only the reader stages (load, structure, questions) on an amplified index kept by "
                         "--keep-index")
    ap.add_argument("--json-line", action="store_true", help=argparse.SUPPRESS)  # --serve's report as the last line
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--variant-cosine", type=float, default=0.65,
                    help="cosine of a copy's embedding to its original (the rotations' trace / D)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="the embeddings' stored dtype")
    ap.add_argument("--work-dir", default="/tmp/hpengine_amplified")
    ap.add_argument("--synonym-ann-dims", type=int, default=None,
                    help="graph.synonym_ann_dims of the synonym search (default: the index's, by size)")
    ap.add_argument("--keep-index", action="store_true")
    ap.add_argument("--recall-queries", type=int, default=2000,
                    help="names whose exact synonym pairs are found by brute force (untimed check; 0: none)")
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    ap.add_argument("--questions", type=int, default=1024)
    ap.add_argument("--methods", nargs="+", default=["dense", "hyperprove", "ppr"])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--page-out", action=argparse.BooleanOptionalAction, default=True,
                    help="eval.page_out: hand the mapped pages the queries read back after each batch")
    ap.add_argument("--encoder-dtype", default="auto")
    ap.add_argument("--seed-backend", default="auto", choices=("auto", "exact", "faiss_flat", "faiss_ivf"),
                    help="retrieval.seed_backend of the dense fact and passage searches")
    add_common_args(ap)
    args = ap.parse_args(argv)
    if args.copies < 1:
        ap.error(f"--copies must be >= 1 (got {args.copies})")
    if not (args.index or args.serve):
        ap.error("give --index (amplify and run every stage) or --serve (the reader stages of a kept index)")
    if args.threads:
        torch.set_num_threads(args.threads)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = run(args)
    if args.json_line:
        print(json.dumps(report))
        return 0
    n = report["counts"]["passages"]
    records = [Record("amplified", stage, {"passages": n}, sec, n, 1, report["peak_rss_mib"][stage])
               for stage, sec in report["seconds"].items()]
    return finish(args, records, meta=report)


if __name__ == "__main__":
    sys.exit(main())
