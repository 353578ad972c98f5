"""benchmarks/e2e/amplify_corpus.py grows a corpus by renamed copies: deterministic for a seed, copy 0
is the originals, each copy renames its name words by one bijection (consistent over titles and
texts), stoplist words stay, titles stay unique per page. A small hand-written pool; no models."""
import json
import re

import pytest


@pytest.fixture(scope="module")
def amp(load_benchmark):
    return load_benchmark("e2e/amplify_corpus")


FIRST = ["John", "Mary", "Peter", "Anna", "Louis", "Clara", "Oscar", "Edith", "Hugo", "Ingrid", "Felix", "Greta"]
LAST = ["Smith", "Garcia", "Novak", "Berg", "Moreau", "Tanaka", "Okafor", "Lindqvist", "Rossi", "Kowalski"]
PLACES = ["Paris", "Oslo", "Lima", "Kyoto", "Dakar", "Quito", "Perth", "Tromso"]


def _pool():
    """~60 passages: people born in places, married to each other (bridge entities), a page split in
    two paragraphs (a repeated title), sentence starters, months, weekdays and acronyms."""
    pool = []
    for i in range(48):
        first, last, place = FIRST[i % len(FIRST)], LAST[(i * 7) % len(LAST)], PLACES[(i * 3) % len(PLACES)]
        spouse = f"{FIRST[(i + 5) % len(FIRST)]} {LAST[(i * 3 + 1) % len(LAST)]}"
        pool.append({"title": f"{first} {last} ({i})",
                     "text": f"{first} {last} was born in {place} on {['May', 'June', 'March'][i % 3]} {i + 1}, "
                             f"a {['Monday', 'Friday'][i % 2]}. The {last} family moved. He married {spouse} "
                             f"of the BBC in {1900 + i}. In {place} the river is wide. {last} II died there."})
    for place in PLACES:
        pool.append({"title": place, "text": f"{place} is a city. The mayor of {place} is {FIRST[len(place)]} Rossi."})
    # a page of two paragraphs (a repeated title)
    pool.append({"title": "Oslo", "text": "Oslo has a harbour. It is the capital. the city grew."})
    pool.append({"title": "the river", "text": "the river is long and the city is old."})  # no name word at all
    return pool


def _words(text):
    return re.findall(r"[^\W\d_]+", text)


def test_deterministic_for_a_seed(amp):
    pool = _pool()
    a, sa = amp.amplify(pool, 200, seed=3)
    b, sb = amp.amplify(pool, 200, seed=3)
    c, _ = amp.amplify(pool, 200, seed=4)
    assert a == b and {k: v for k, v in sa.items() if k != "seconds"} == {k: v for k, v in sb.items() if k != "seconds"}
    assert a != c
    # a smaller size is a prefix of a larger one (same shuffle, same copies)
    assert amp.amplify(pool, 90, seed=3)[0] == a[:90]


def test_copy_zero_is_the_originals(amp):
    pool = _pool()
    out, stats = amp.amplify(pool, len(pool), seed=1)
    assert sorted(map(json.dumps, out)) == sorted(map(json.dumps, pool))
    assert stats["copies"] == 1 and stats["renamed_words"] == 0
    big, stats = amp.amplify(pool, 3 * len(pool) + 5, seed=1)
    assert len(big) == 3 * len(pool) + 5 and stats["copies"] == 4
    assert big[: len(pool)] == out
    # copy k of position j is a renamed copy of the same original as copy 0 at position j
    for i in range(len(pool), len(big)):
        assert len(_words(big[i]["text"])) == len(_words(out[i % len(pool)]["text"]))


def _copy_maps(pool, out, k):
    """Per word of the originals, the set of words it became in copy k over all its passages (titles
    and texts; a title's suffix " (k)" is digits, not a word)."""
    n = len(pool)
    seen = {}
    for j in range(n):
        orig, new = out[j], out[k * n + j]
        src = _words(orig["title"]) + _words(orig["text"])
        dst = _words(new["title"]) + _words(new["text"])
        assert len(src) == len(dst), (orig, new)
        for s, d in zip(src, dst):
            seen.setdefault(s, set()).add(d)
    return seen


def test_renaming_is_consistent_bijective_and_keeps_stoplist(amp):
    pool = _pool()
    out, stats = amp.amplify(pool, 4 * len(pool), seed=0)
    words = amp.name_words(pool)
    assert {"John", "Smith", "Paris", "Oslo", "BBC"} <= set(words)
    assert not {"The", "He", "In", "May", "June", "Monday", "II"} & set(words)  # stoplist, Roman numerals
    assert "river" not in words and "the" not in words
    for k in (1, 2, 3):
        seen = _copy_maps(pool, out, k)
        mapping = {}
        for s, d in seen.items():
            assert len(d) == 1, f"copy {k}: {s} became {d}"  # one word, in every passage of the copy
            mapping[s] = d.pop()
        # name words map to name words of the same shape class, injectively; other words stay
        named = {s: d for s, d in mapping.items() if s in words}
        assert set(named.values()) <= set(words)
        assert len(set(named.values())) == len(named)
        assert all(amp.shape(s) == amp.shape(d) for s, d in named.items())
        assert all(d == s for s, d in mapping.items() if s not in words)
        assert mapping["The"] == "The" and mapping["May"] == "May" and mapping["II"] == "II"
        assert any(s != d for s, d in named.items())
        # the function's own bijection agrees
        full = amp.copy_mapping(amp.buckets(words), 0, k)
        assert sorted(full) == sorted(set(full.values())) and all(named[s] == d for s, d in full.items() if s in named)


def test_bridge_entities_stay_linked_within_a_copy(amp):
    pool = _pool()
    out, _ = amp.amplify(pool, 2 * len(pool), seed=5)
    n = len(pool)
    mapping = amp.copy_mapping(amp.buckets(amp.name_words(pool)), 5, 1)
    for j in range(n):
        assert out[n + j]["text"] == amp.rename(out[j]["text"], mapping)


def test_titles_unique_per_page(amp):
    pool = _pool()
    out, stats = amp.amplify(pool, 5 * len(pool), seed=2)
    n = len(pool)
    pages = {}
    for i, p in enumerate(out):
        k, orig = i // n, out[i % n]["title"]
        pages.setdefault(p["title"], set()).add((k, orig))
    # a title names one page: (copy, original title); the split page keeps one title per copy
    assert all(len(v) == 1 for v in pages.values())
    assert sum(p["title"] == "Oslo" for p in out[:n]) == 2
    assert len({(p["title"], p["text"]) for p in out}) == len(out)  # no exact duplicates
    # "the river" has no name word: every copy collides with the original and takes a suffix
    assert {f"the river ({k})" for k in range(1, 5)} <= set(pages)
    assert stats["title_collisions"] >= 4


def test_cli_writes_the_corpus(amp, tmp_path, capsys):
    data = tmp_path / "data"
    pool = _pool()
    for d, part in zip(amp.DATASETS, (pool[:20], pool[20:40], pool[40:] + pool[:2])):  # 2 exact duplicates
        (data / d).mkdir(parents=True)
        (data / d / "corpus.json").write_text(json.dumps(part))
    out = tmp_path / "c.json"
    assert amp.main(["--size", "150", "--seed", "0", "--out", str(out), "--data-dir", str(data)]) == 0
    written = json.loads(out.read_text())
    assert len(written) == 150 and written == amp.amplify(pool, 150, 0)[0]
    assert "150 passages" in capsys.readouterr().out
    assert amp.main(["--size", "0", "--out", str(out), "--data-dir", str(data)]) == 2
