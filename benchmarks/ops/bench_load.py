"""Loading a saved index (``Index.load``): memory-mapped (``mmap=True``, the CPU default) against a
copy (``mmap=False``), on synthetic indexes of H facts x D dims (docs/methods/index.md#the-saved-index).

Each synthetic index is written once with ``Index.save`` (the real format, fsynced) under ``dir=``
and removed after its cases (``keep=true`` keeps it): H facts of ~60 characters in passages of 4
facts, H / 2 entities, 2 extracted (fact, entity) pairs per fact, H / 100 synonym pairs, and random
unit-vector embeddings for facts, entities and passages in ``dtype=`` (float32: what the encoder
stores; fact_emb alone is 1.5 GB at H = 1M, D = 384).

Every case runs in its own subprocess (its RSS and peak belong to it alone) and measures:

  load s         ``Index.load(path, mmap=..., verify=...)`` wall seconds
  texts s        of those, reading texts.json (timed again on its own afterwards; it does not
                 depend on mmap)
  load MiB       RSS after the load minus RSS before it (a mapping counts only the pages touched)
  query s        the first dense query: ``fact_emb @ q`` for 8 queries and a top-10, which touches
                 every row (a mapped index reads its pages here)
  query MiB      RSS after that query minus RSS before the load
  again s        the same query a second time
  peak MiB       the process's ``ru_maxrss``

Cases (``cases=MODE:VERIFY,...``): MODE ``mmap`` or ``copy``, VERIFY ``auto``, ``true`` or
``false`` (``Index.load``'s ``verify``: ``auto`` checks the embedding values unless they stay
mapped and exceed 1 GiB). ``cache=cold`` evicts the index's files from the page cache before each
case (``posix_fadvise(DONTNEED)`` on those files only); ``warm`` leaves them there (just written
or read by the previous case).

    nice -n 10 python -m benchmarks ops bench_load sizes=100000,1000000 cache=cold,warm
    nice -n 10 python -m benchmarks ops bench_load sizes=3000000 cache=cold   # 4.6 GB of fact_emb in /tmp
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks._harness import Common, Record, opt, report, rss_bytes, script_args, time_once

ROOT = Path(__file__).resolve().parents[2]
MODES = ("mmap", "copy")
VERIFY = {"auto": "auto", "true": True, "false": False}


@dataclass
class Config(Common):
    sizes: tuple[int, ...] = opt((20_000,), "facts H of each synthetic index")
    dim: int = opt(384, "embedding width D")
    dtype: str = opt("float32", "float32, bfloat16 or float16")
    cases: tuple[str, ...] = opt(("mmap:auto", "mmap:false", "mmap:true", "copy:auto"),
                                 "MODE:VERIFY with MODE mmap|copy and VERIFY auto|true|false")
    cache: tuple[str, ...] = opt(("cold",), "cold (evict the files first) and/or warm")
    dir: str = opt("/tmp", "where the synthetic indexes are written")
    keep: bool = opt(False, "keep the synthetic indexes")
    write: int = opt(0, "internal: write an index of this many facts at path= (a worker)")
    case: str = opt("", "internal: run one MODE:VERIFY case on path= (a worker)")
    path: str = opt("", "internal: the index folder of a worker")


# --- the synthetic index --------------------------------------------------------------------

def write_index(path: Path, num_facts: int, dim: int, dtype: str, seed: int = 0) -> dict:
    """Save a synthetic index of ``num_facts`` facts at ``path``; its sizes (called in a subprocess)."""
    import torch

    from hpengine.graph import Index
    from hpengine.graph import Passage

    gen = torch.Generator().manual_seed(seed)
    dtype_ = getattr(torch, dtype)
    h, v, p = num_facts, max(1, num_facts // 2), max(1, num_facts // 4)

    def unit_rows(n: int) -> torch.Tensor:  # [n, dim] random unit vectors, made in blocks
        out = torch.empty(n, dim, dtype=dtype_)
        for start in range(0, n, 65536):
            block = torch.randn(min(65536, n - start), dim, generator=gen)
            out[start:start + len(block)] = torch.nn.functional.normalize(block, dim=1).to(dtype_)
        return out

    facts = torch.arange(h)
    entities = torch.stack([facts % v, (facts * 7919 + 1) % v], 1)  # [h, 2] two entities per fact
    pairs = torch.randint(0, v, (2, max(1, h // 200)), generator=gen)
    pairs = pairs[:, pairs[0] != pairs[1]]
    index = Index(
        passages=[Passage(f"Passage {j}", f"Text of passage {j}.") for j in range(p)],
        facts=[f"Fact {i} says that entity {i % v} is linked to entity {(i * 7919 + 1) % v}." for i in range(h)],
        entities=[f"Entity {a}" for a in range(v)],
        fact_passage=facts // 4 % p,
        fact_entity_raw=torch.stack([facts.repeat_interleave(2), entities.reshape(-1)]),
        synonyms=torch.cat([pairs, pairs.flip(0)], 1),
        fact_emb=unit_rows(h), entity_emb=unit_rows(v), passage_emb=unit_rows(p),
        meta={"encoder": "synthetic"},
    )
    save_s = time_once(lambda: index.save(path))
    gen_dir = next(path.glob("gen-*"))
    return {"save_s": save_s,
            "tensors_mib": (gen_dir / "tensors.safetensors").stat().st_size / 2**20,
            "texts_mib": (gen_dir / "texts.json").stat().st_size / 2**20}


def evict(path: Path) -> None:
    """Drop the index's files from the page cache (only these files; needs no privileges)."""
    for file in path.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# --- one case, in its own process -----------------------------------------------------------

def _rss_mib() -> float:
    return rss_bytes() / 2**20


def run_case(path: Path, mode: str, verify: str, threads: int) -> dict:
    import torch

    from hpengine.graph import Index, IndexStore

    if threads:
        torch.set_num_threads(threads)
    base = _rss_mib()
    loaded = {}
    load_s = time_once(lambda: loaded.setdefault("index", Index.load(path, mmap=mode == "mmap", verify=VERIFY[verify])))
    index = loaded["index"]
    load_mib = _rss_mib() - base
    q = torch.nn.functional.normalize(torch.randn(8, index.fact_emb.shape[1], generator=torch.Generator()
                                                  .manual_seed(1)), dim=1).to(index.fact_emb.dtype)

    def query():
        return torch.topk((index.fact_emb @ q.t()).float(), 10, dim=0)

    query_s = time_once(query)
    query_mib = _rss_mib() - base
    again_s = time_once(query)
    texts = IndexStore(path).generation().folder / "texts.json"
    texts_s = time_once(lambda: json.loads(texts.read_text(encoding="utf-8")))  # the parse a load does
    return {"H": index.num_facts, "D": int(index.fact_emb.shape[1]), "dtype": str(index.fact_emb.dtype)[6:],
            "mode": mode, "verify": verify, "load_s": load_s, "texts_s": texts_s, "load_mib": load_mib,
            "query_s": query_s, "query_mib": query_mib, "again_s": again_s,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads()}


def _worker(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.ops.bench_load", *argv], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- report ---------------------------------------------------------------------------------

def print_table(rows: list[dict]) -> None:
    print(f"{'H':>9} {'dtype':>8} {'case':>12} {'cache':>5} {'load s':>8} {'texts s':>8} {'load MiB':>9} "
          f"{'query s':>8} {'query MiB':>10} {'again s':>8} {'peak MiB':>9}")
    for r in rows:
        print(f"{r['H']:>9} {r['dtype']:>8} {r['mode'] + ':' + r['verify']:>12} {r['cache']:>5} {r['load_s']:>8.3f} "
              f"{r['texts_s']:>8.3f} {r['load_mib']:>9.0f} {r['query_s']:>8.3f} {r['query_mib']:>10.0f} "
              f"{r['again_s']:>8.3f} {r['peak_mib']:>9.0f}")


def to_record(row: dict):
    """A case as a harness :class:`~benchmarks._harness.Record` (one load per run; peak: the load's own MiB)."""
    case = {k: row[k] for k in ("H", "D", "dtype", "cache")}
    extra = {k: v for k, v in row.items() if k not in case and k not in ("load_s", "load_mib")}
    return Record("load", f"{row['mode']}:{row['verify']}", case, row["load_s"], 1, 1, row["load_mib"], extra)


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    cases = [tuple(c.split(":")) for c in args.cases]
    bad = [c for c in args.cases if len(c.split(":")) != 2 or c.split(":")[0] not in MODES
           or c.split(":")[1] not in VERIFY]
    if bad:
        print(f"hpengine: error: cases= takes MODE:VERIFY with MODE in {list(MODES)}, VERIFY in {list(VERIFY)} "
              f"(got {bad})", file=sys.stderr)
        return 2
    if args.write:
        print(json.dumps(write_index(Path(args.path), args.write, args.dim, args.dtype)))
        return 0
    if args.case:
        mode, verify = args.case.split(":")
        print(json.dumps(run_case(Path(args.path), mode, verify, args.threads)))
        return 0
    rows = []
    for num in args.sizes:
        path = Path(args.dir) / f"hpengine-bench-load-{num}-{args.dim}-{args.dtype}-{os.getpid()}"
        try:
            written = _worker(f"write={num}", f"path={path}", f"dim={args.dim}", f"dtype={args.dtype}")
            print(json.dumps({"H": num, **written}), file=sys.stderr, flush=True)
            for cache in args.cache:
                for mode, verify in cases:
                    if cache == "cold":
                        evict(path)
                    row = _worker(f"case={mode}:{verify}", f"path={path}", f"threads={args.threads}")
                    rows.append({**row, "cache": cache, **written})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(path, ignore_errors=True)
    print_table(rows)
    report(__file__, args, [to_record(r) for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
