"""Deterministic corpus amplifier: the real passages of the three dev corpora, grown to any size N
by renamed copies, so that text, sentence shapes and entity statistics stay realistic.

    python -m benchmarks e2e amplify_corpus --size 100000 --seed 0 --out /tmp/scale/corpus_100000.json
    python -m benchmarks e2e amplify_corpus --size 30000 --seed 0 --out c.json --data-dir ../shared/data

Design (issue 31 §4; ``bench_scale.py`` indexes and queries its output):

* **Pool.** The passages of ``2wikimultihopqa``, ``hotpotqa`` and ``musique`` (``corpus.json``, in
  that order), title and text stripped as the corpus loader strips them. 7 of the 19,349 are exact
  ``(title, text)`` duplicates across corpora, which the loader would drop, so the pool keeps the
  first of each: 19,342 passages (``len(pool)`` below). The pool is shuffled once with ``seed``.
* **Copies.** Output passage ``i`` is copy ``k = i // len(pool)`` of shuffled passage
  ``i % len(pool)``; copy 0 is the original, so sizes up to 19,342 hold real passages only.
* **Renaming.** Copy ``k >= 1`` renames *name words*: letter runs (``[^\\W\\d_]+``, at least two
  letters) that start upper-case and are rarely seen lower-cased in the pool (count of
  ``w.lower()`` < ``ratio`` x count of ``w``, default 0.2), minus a stoplist (sentence starters,
  pronouns, months and weekdays and their abbreviations, honorifics such as Mr/Dr/St/Jr, company
  suffixes) and Roman numerals (``II``, ``XIV``: they follow names and must stay numerals). Each
  copy applies one bijection of the name-word vocabulary, drawn from ``(seed, k)``, to every
  title and text of that copy, so a bridge entity shared by two passages is renamed the same way
  in both (the passages stay linked within a copy) and variants stay variants ("John Smith",
  "Smith", "Smith's"). Letter runs map to letter runs, so the tokenisation is unchanged and each
  copy's renaming is invertible.
* **Statistics kept.** The bijection permutes words only within a *bucket*: the same shape class
  (``Xxxx``, ``XXXX``, mixed case such as ``McDonald``; NER relies on shape) and a window of 64
  consecutive words in the order of decreasing pool count. Popular names stay popular, rare ones
  rare: the Zipf curve of names and the entity-degree distribution of the graph are those of the
  pool, while the names themselves differ between copies (one copy's "Smith" is another's
  "Garcia", as the same surname recurs among unrelated people in a real corpus).
* **Titles unique per page.** A title is the page of ``(k, original title)``: the pool itself
  repeats titles (MuSiQue splits pages into paragraphs; a few pages are in two corpora), and those
  stay shared within each copy. A renamed title already used by another page (an original, or an
  earlier copy's page, e.g. a title without name words) gets the suffix ``" (k)"``; counted as a
  collision. So no two output passages are equal, and an index of the output holds exactly N.
* Not renamed: digits (years, dates), lower-case words, single letters (initials). Questions are
  not renamed: the dev questions refer to copy 0.

Counts at seed 0: 49,313 name words. ``--size 30000``: 48,538 of them renamed by copy 1, 1,839
title collisions among its 10,658 passages; ``--size 100000``: all renamed by some copy, 14,198
collisions among the 80,658 copied passages. Most collisions are titles without any name word
(3,068 of the 19,342 pool passages, 16%: works named with ordinary words, "Dark River (2017
film)", "Wrong Turn 2: Dead End"), which every copy keeps and suffixes.

Limits (what a real corpus N times larger would do differently):

* The name-word *vocabulary* is the pool's: copies recombine its words ("John Smith" becomes
  "Peter Garcia"), so distinct multi-word entity names keep growing with N, but single-word names
  do not, where a real corpus keeps adding rare names (Heaps' law). Entity counts therefore grow
  somewhat sublinearly; ``bench_scale.py`` prints them per size.
* Titles without name words, and their mentions in the text, are the same in every copy, so those
  entities (16% of the passages' titles) gain one passage per copy, like a hub.
* Proper adjectives count as name words ("American" is rarely lower-cased), and buckets are by
  frequency, so "an American classicist" can become "an Maria classicist": the shape of the text
  stays, its sense does not always.

Fast: 9 s for 100k passages on the 2-core dev box, 30 s while other runs share it (counting the
pool's words, then per copy one lookup per name-word occurrence; each pool passage is cut around
its name words once).
The output is a JSON list of ``{"title", "text"}`` (``corpus.json``'s schema).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

DATASETS = ("2wikimultihopqa", "hotpotqa", "musique")
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data of the repository

WORD = re.compile(r"[^\W\d_]+")  # a run of letters (any script); digits and "_" split runs
ROMAN = re.compile(r"[IVXLCDM]+")
WINDOW = 64
RATIO = 0.2

# Capitalised words that are not names even when rarely lower-cased in the pool (most sentence
# starters are excluded by the ratio already: "the" is common; they are listed for safety).
STOPLIST = frozenset("""
The A An This That These Those There Here It Its He She His Her Him They Their Them We Our Us You
Your I In On At Of For From By With As To Into After Before During Since Until Upon About Over
Under Between Among Through And But Or Nor So Yet If When While Where Which Who Whom Whose What
Why How Although Though Because Unlike Like Both Either Neither Each Every All Some Many Most
No Not Also However Then Later Other Another Such One Two Three
January February March April May June July August September October November December
Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
Monday Tuesday Wednesday Thursday Friday Saturday Sunday Mon Tue Tues Wed Thu Thur Thurs Fri Sat Sun
Mr Mrs Ms Miss Dr Prof St Ste Jr Sr Mt Ft Rev Hon Sir Dame Lord Lady Co Corp Inc Ltd Llc Plc
Bros No Nos Vol Vols Pp Ed Eds Ph
""".split())


def shape(word: str) -> str:
    """Shape class of a capitalised word: ``Xx`` (Smith), ``XX`` (BBC) or ``XxX`` (McDonald)."""
    if word.isupper():
        return "XX"
    return "Xx" if word[1:].islower() else "XxX"


def load_pool(data_dir: str | Path) -> list[dict]:
    """The passages of the three corpora, stripped, exact ``(title, text)`` duplicates and empty
    texts dropped (as the corpus loader drops them), in corpus order."""
    pool, seen = [], set()
    for name in DATASETS:
        for p in json.loads((Path(data_dir) / name / "corpus.json").read_text()):
            title, text = p["title"].strip(), p["text"].strip()
            if text and (title, text) not in seen:
                seen.add((title, text))
                pool.append({"title": title, "text": text})
    return pool


def _word_counts(passages: list[dict]) -> Counter:
    counts = Counter()
    for p in passages:
        counts.update(WORD.findall(p["title"]))
        counts.update(WORD.findall(p["text"]))
    return counts


def name_words(passages: list[dict], ratio: float = RATIO, stoplist=STOPLIST) -> Counter:
    """The name words of ``passages`` (titles and texts) with their counts: capitalised letter runs
    of two or more letters whose lower-cased form occurs fewer than ``ratio`` times as often,
    without ``stoplist`` words and Roman numerals."""
    counts = _word_counts(passages)
    return Counter({w: c for w, c in counts.items()
                    if len(w) > 1 and w[0].isupper() and w not in stoplist and not ROMAN.fullmatch(w)
                    and counts.get(w.lower(), 0) < ratio * c})


def segments(text: str, words) -> list[str]:
    """``text`` cut around its occurrences of ``words``: literal pieces at even positions, words at
    odd ones (``"".join`` gives ``text`` back). Cut once per pool passage, so that each copy only
    looks up its name words (:func:`join_renamed`)."""
    out, last = [], 0
    for m in WORD.finditer(text):
        if m.group() in words:
            out.append(text[last:m.start()])
            out.append(m.group())
            last = m.end()
    out.append(text[last:])
    return out


def join_renamed(segs: list[str], mapping: dict[str, str]) -> str:
    """The text of :func:`segments` ``segs`` with its words renamed by ``mapping``."""
    if not mapping or len(segs) == 1:
        return "".join(segs)
    segs = list(segs)
    segs[1::2] = [mapping.get(w, w) for w in segs[1::2]]
    return "".join(segs)


def buckets(words: Counter, window: int = WINDOW) -> list[list[str]]:
    """The permutation buckets: per shape class, the words by decreasing count (ties by the word),
    cut into consecutive windows of ``window``."""
    out = []
    for cls in ("Xx", "XX", "XxX"):
        ranked = sorted((w for w in words if shape(w) == cls), key=lambda w: (-words[w], w))
        out.extend(ranked[i:i + window] for i in range(0, len(ranked), window))
    return out


def copy_mapping(bucket_list: list[list[str]], seed: int, k: int) -> dict[str, str]:
    """Copy ``k``'s bijection of the name words: a permutation inside each bucket, drawn from
    ``(seed, k)``; copy 0 is the identity (an empty dict). Only words that change are listed."""
    if k == 0:
        return {}
    rng = np.random.default_rng([seed, k])
    mapping = {}
    for bucket in bucket_list:
        for src, j in zip(bucket, rng.permutation(len(bucket))):
            if bucket[j] != src:
                mapping[src] = bucket[j]
    return mapping


def rename(text: str, mapping: dict[str, str]) -> str:
    """``text`` with every letter run in ``mapping`` replaced."""
    if not mapping:
        return text
    return WORD.sub(lambda m: mapping.get(m.group(), m.group()), text)


def amplify(pool: list[dict], size: int, seed: int = 0, *, ratio: float = RATIO, window: int = WINDOW,
            stoplist=STOPLIST) -> tuple[list[dict], dict]:
    """``size`` passages from ``pool``: shuffled originals, then renamed copies (module docstring).

    Args:
        pool: passages ``{"title", "text"}`` without exact duplicates (:func:`load_pool`).
        size: number of output passages.
        seed: shuffle and per-copy renaming seed.
        ratio, window, stoplist: name-word rule and bucket width (module docstring).

    Returns:
        ``(passages, stats)``; stats: ``passages``, ``pool``, ``copies`` (copies begun, copy 0
        included), ``name_words`` (vocabulary), ``renamed_words`` (distinct name words that some
        generated copy changes), ``title_collisions`` (titles given a suffix), ``seconds``.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0 (got {size})")
    if not pool:
        raise ValueError("pool must not be empty (got 0 passages)")
    start = time.perf_counter()
    n = len(pool)
    order = np.random.default_rng(seed).permutation(n)
    words = name_words(pool, ratio, stoplist)
    bucket_list = buckets(words, window)
    copies = -(-size // n)
    used_rows = order[: min(n, size)]  # copy 0 needs no cutting; later copies reuse every pool passage
    cut = {} if copies == 1 else {int(j): (segments(pool[j]["title"], words), segments(pool[j]["text"], words))
                                   for j in used_rows}
    # a page is (copy, original title); its output title is fixed at its first passage
    page_title: dict[tuple[int, str], str] = {}
    used: set[str] = {p["title"] for p in pool}  # copy 0's titles, kept as they are
    out, renamed, collisions = [], set(), 0
    for k in range(copies):
        mapping = copy_mapping(bucket_list, seed, k)
        renamed.update(mapping)
        for j in order[: min(n, size - k * n)]:
            p = pool[j]
            key = (k, p["title"])
            title = page_title.get(key)
            if title is None:
                title = join_renamed(cut[int(j)][0], mapping) if k else p["title"]
                if k > 0 and title in used:
                    collisions += 1
                    base, r = title, 1
                    title = f"{base} ({k})"
                    while title in used:  # a pool title may itself end in " (k)"
                        r += 1
                        title = f"{base} ({k}.{r})"
                used.add(title)
                page_title[key] = title
            out.append({"title": title, "text": join_renamed(cut[int(j)][1], mapping) if k else p["text"]})
    stats = {"passages": len(out), "pool": n, "copies": copies, "name_words": len(words),
             "renamed_words": len(renamed), "title_collisions": collisions,
             "seconds": round(time.perf_counter() - start, 2)}
    return out, stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, required=True, help="number of output passages")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output JSON file (a list of {title, text})")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                    help="folder with <dataset>/corpus.json (default: ../shared/data of the repository)")
    args = ap.parse_args(argv)
    if args.size < 1:
        print(f"amplify_corpus: --size must be >= 1 (got {args.size})", file=sys.stderr)
        return 2
    missing = [d for d in DATASETS if not (Path(args.data_dir) / d / "corpus.json").is_file()]
    if missing:
        print(f"amplify_corpus: no corpus.json for {', '.join(missing)} under --data-dir (got {args.data_dir})",
              file=sys.stderr)
        return 2
    passages, stats = amplify(load_pool(args.data_dir), args.size, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(passages, ensure_ascii=False))
    print(f"{stats['passages']:,} passages ({stats['copies']} copies of a pool of {stats['pool']:,}), "
          f"{stats['name_words']:,} name words, {stats['renamed_words']:,} renamed, "
          f"{stats['title_collisions']:,} title collisions, {stats['seconds']} s -> {args.out}")
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
