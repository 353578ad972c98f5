"""Bad inputs at the command line, run as subprocesses: each gets a non-zero exit and one line
``hpengine: error: ...`` naming the problem, no traceback, and an existing index is left
byte-for-byte unchanged; kill -9 at each window of a save never loses the index.

One small index is built once per module (real spaCy and MiniLM); cases that fail before any
model loads take about a second each on 2 cores.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from hpengine.graph import Index, builtin_corpus_path

CORPUS = [
    {"title": "Solo (film)", "text": "Solo is a 1999 film directed by Ann Berg. It was shot in Bergen."},
    {"title": "Ann Berg", "text": "Ann Berg is a Norwegian director. She was born in Oslo."},
    {"title": "Bergen", "text": "Bergen is a city on the west coast of Norway."},
]
MORE = [{"title": "Oslo", "text": "Oslo is the capital of Norway. It lies on the Oslofjord."}]
QUESTIONS = [{"id": "q1", "question": "Where was the director of Solo born?", "answer": ["Oslo"],
              "gold_passages": [CORPUS[1]]}]
FAST = ["encoder.dtype=float32"]


def checksum(folder) -> dict:
    """sha256 of every file under ``folder`` and of the names beside it (leftovers show up)."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            if name in (".hpengine.lock", ".hpengine.holder"):  # the lock and who last held it; no index data
                continue
            p = os.path.join(root, name)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    out["<siblings>"] = sorted(n for n in os.listdir(os.path.dirname(os.path.abspath(folder)))
                               if n.startswith((os.path.basename(folder), "." + os.path.basename(folder))))
    return out


def write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(folder, index)``: a built index kept pristine (cases work on copies) and input files."""
    root = tmp_path_factory.mktemp("cli_errors")
    files = {
        "corpus.json": CORPUS, "more.jsonl": "\n".join(json.dumps(r) for r in MORE) + "\n",
        "empty_list.json": [], "empty_file.json": "", "blank.jsonl": "\n  \n",
        "only_empty_text.json": [{"title": "A", "text": "   "}],
        "latin1.jsonl": json.dumps(CORPUS[0]).encode() + b"\n" + '{"title": "Caf\xe9", "text": "x"}'.encode("latin-1"),
        "bad_record.json": [CORPUS[0], {"title": "B"}],
        "questions.json": QUESTIONS, "no_questions.json": [],
        "questions_latin1.jsonl": json.dumps(QUESTIONS[0]).encode() + b"\n" + b'{"question": "Caf\xe9?"}',
        "blank_question.json": [{"question": "  ", "answer": ["x"]}],
        "a_file.txt": "not a folder",
    }
    for name, content in files.items():
        write(root / name, content)
    (root / "a_folder").mkdir()
    run = cli_in_process("index", f"corpus={root / 'corpus.json'}", f"out={root / 'pristine'}", *FAST)
    assert run.returncode == 0, run.stderr
    return root


@pytest.fixture
def work(built, tmp_path):
    """A copy of the pristine index at ``tmp_path/idx`` plus the module's input files."""
    return copy_work(built, tmp_path)


def assert_user_error(run, *needles):
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("hpengine: error:")]
    assert len(lines) == 1, run.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# (args, needles): {w} is the work folder; every case leaves {w}/idx byte-for-byte unchanged
CASES = {
    # data must never be lost or polluted
    "add without corpus": (["add", "out={w}/idx"], ["corpus="]),
    "index without corpus over an index": (["index", "out={w}/idx", "overwrite=true"], ["corpus="]),
    "index over an index without overwrite": (["index", "corpus={w}/corpus.json", "out={w}/idx"],
                                              ["already holds an index", "overwrite=true"]),
    "empty corpus list": (["index", "corpus={w}/empty_list.json", "out={w}/idx", "overwrite=true"],
                          ["no passages"]),
    "empty corpus file": (["index", "corpus={w}/empty_file.json", "out={w}/idx", "overwrite=true"],
                          ["empty_file.json", "invalid JSON"]),
    "blank jsonl add": (["add", "corpus={w}/blank.jsonl", "out={w}/idx"], ["no passages"]),
    "only empty texts": (["add", "corpus={w}/only_empty_text.json", "out={w}/idx"], ["no passages"]),
    "non-utf8 corpus": (["add", "corpus={w}/latin1.jsonl", "out={w}/idx"], ["latin1.jsonl:2", "UTF-8"]),
    "bad corpus record": (["add", "corpus={w}/bad_record.json", "out={w}/idx"], ["bad_record.json", "record 1"]),
    "missing corpus": (["add", "corpus={w}/nope.json", "out={w}/idx"], ["not found", "nope.json"]),
    "corpus is a folder": (["add", "corpus={w}/a_folder", "out={w}/idx"], ["folder"]),
    "index out is a file": (["index", "corpus={w}/corpus.json", "out={w}/a_file.txt"], ["a_file.txt", "file"]),
    "add to no index": (["add", "corpus={w}/corpus.json", "out={w}/nothing"], ["no such index"]),
    "overwrite for add": (["add", "corpus={w}/corpus.json", "out={w}/idx", "overwrite=true"], ["overwrite="]),
    # eval and ask inputs
    "eval without questions": (["eval", "index={w}/idx"], ["questions="]),
    "eval 0 questions": (["eval", "index={w}/idx", "questions={w}/no_questions.json"], ["no questions"]),
    "eval non-utf8 questions": (["eval", "index={w}/idx", "questions={w}/questions_latin1.jsonl"],
                                ["questions_latin1.jsonl:2", "UTF-8"]),
    "eval blank question": (["eval", "index={w}/idx", "questions={w}/blank_question.json"], ["record 0", "question"]),
    "eval output is a folder": (["eval", "index={w}/idx", "questions={w}/questions.json", "output={w}/a_folder"],
                                ["output=", "folder"]),
    "eval missing index": (["eval", "index={w}/nothing", "questions={w}/questions.json"], ["no such index"]),
    "eval missing llm": (["eval", "index={w}/idx", "questions={w}/questions.json", "model.llm={w}/no_model"],
                         ["model.llm=", "no_model", "get_llm.py"]),
    "eval llm folder not a model": (["eval", "index={w}/idx", "questions={w}/questions.json",
                                     "model.llm={w}/a_folder"], ["model.llm=", "config.json"]),
    "eval ranker missing": (["eval", "index={w}/idx", "questions={w}/questions.json", "retriever=learned",
                             "engine.ranker={w}/nope.safetensors"], ["engine.ranker=", "no such file"]),
    "train out inside the index": (["train", "{w}/idx", "questions={w}/questions.json",
                                    "out={w}/idx/ranker.safetensors"], ["out=", "inside the index folder"]),
    "train out is the questions": (["train", "{w}/idx", "questions={w}/questions.json", "out={w}/questions.json"],
                                   ["out=", "destroy that input"]),
    "ask blank question": (["ask", "{w}/idx", "   "], ["question is empty"]),
    "ask unquoted question": (["ask", "{w}/idx", "Who", "directed?"], ["ask takes IDX and at most one question"]),
    "ask index= too": (["ask", "{w}/idx", "Who?", "index={w}/idx"], ["index="]),
    # config values and keys
    "max_questions -1": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.max_questions=-1"],
                         ["eval.max_questions"]),
    "batch_size 0": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.batch_size=0"],
                     ["eval.batch_size"]),
    "recall_ks [0]": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.recall_ks=[0]"],
                      ["eval.recall_ks"]),
    "recall_ks over passage_width": (["eval", "index={w}/idx", "questions={w}/questions.json",
                                      "eval.recall_ks=[50]"], ["passage_width"]),
    "passage_width 0": (["eval", "index={w}/idx", "questions={w}/questions.json", "engine.passage_width=0"],
                        ["engine.passage_width"]),
    "unknown +key": (["eval", "index={w}/idx", "questions={w}/questions.json", "+foo=1"], ["unknown key 'foo'"]),
    "a key twice": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.batch_size=2",
                     "eval.batch_size=4"], ["eval.batch_size= is given twice"]),
    "the method twice": (["eval", "index={w}/idx", "questions={w}/questions.json", "retriever=dense",
                          "engine=ppr"], ["is given twice ('retriever=dense' and 'engine=ppr')"]),
    "a key twice, once with +": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.batch_size=2",
                                  "+eval.batch_size=4"], ["eval.batch_size= is given twice"]),
    "unknown +nested key": (["add", "corpus={w}/more.jsonl", "out={w}/idx", "+graph.foo=1"], ["graph.foo"]),
    "unknown ++key": (["eval", "index={w}/idx", "questions={w}/questions.json", "++eval.foo=1"], ["eval.foo"]),
    "misspelled key": (["add", "corpus={w}/more.jsonl", "out={w}/idx", "graph.synonym_treshold=0.5"],
                       ["synonym_treshold"]),
    "wrong value type": (["eval", "index={w}/idx", "questions={w}/questions.json", "eval.batch_size=abc"],
                         ["eval.batch_size", "abc"]),
    "unknown engine": (["eval", "index={w}/idx", "questions={w}/questions.json", "retriever=nope"], ["nope"]),
    "bad device": (["add", "corpus={w}/more.jsonl", "out={w}/idx", "device=banana"], ["device=", "banana"]),
    "bad debug value": (["add", "corpus={w}/more.jsonl", "out={w}/idx", "debug=maybe"], ["debug="]),
}
if not torch.cuda.is_available():
    CASES["cuda without cuda"] = (["add", "corpus={w}/more.jsonl", "out={w}/idx", "device=cuda"],
                                  ["device='cuda'", "available: cpu"])


def cli_in_process(*args):
    """``hpengine ARGS`` in this process, as a finished run: exit status and stderr (an exception
    that escapes is a traceback: status 1, its text in stderr)."""
    import contextlib
    import io
    import traceback

    from hpengine.cli import main

    err, out = io.StringIO(), io.StringIO()
    debug = os.environ.pop("HPENGINE_DEBUG", None)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            main([str(a) for a in args])
        status = 0
    except SystemExit as exc:
        status = exc.code
    except Exception:  # noqa: BLE001 - escaping the front door is the failure under test
        status = 1
        err.write(traceback.format_exc())
    finally:
        if debug is not None:
            os.environ["HPENGINE_DEBUG"] = debug
    return subprocess.CompletedProcess(list(args), status, out.getvalue(), err.getvalue())


#: the cases also run as real processes: exit status and stderr of the process itself
SUBPROCESS_CASES = ("add without corpus", "misspelled key", "eval missing index")


@pytest.fixture(scope="module")
def table_runs(built, tmp_path_factory):
    """Every case of CASES in its own copy of the index, in this process (the one-line error is
    the front door's; SUBPROCESS_CASES also run as processes): ``{name: (folder, before, run, after)}``."""
    root = tmp_path_factory.mktemp("cases")
    runs = {}
    for i, name in enumerate(sorted(CASES)):
        w = copy_work(built, root / str(i))
        before = checksum(w / "idx")
        run = cli_in_process(*[a.format(w=w) for a in CASES[name][0]])
        runs[name] = (w, before, run, checksum(w / "idx"))
    return runs


def copy_work(built, folder):
    """A copy of the pristine index at ``folder/idx`` plus the module's input files."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in built.iterdir():
        if p.is_file():
            shutil.copy(p, folder / p.name)
    (folder / "a_folder").mkdir()
    shutil.copytree(built / "pristine", folder / "idx")
    return folder


def _as_from_a_shell() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults and unblocked, as a shell
    starts a command, whatever the test process inherited or set (an ignored or blocked SIGINT is
    inherited across exec, and Python then never raises KeyboardInterrupt)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cli_many(jobs: dict, timeout=240) -> dict:
    """Several ``hpengine`` processes at once (each is mostly single-threaded start-up, so two cores
    run two of them in the time of one): ``{key: (args, cwd, env)}`` -> ``{key: CompletedProcess}``."""
    procs = {}
    for key, (args, cwd, env) in jobs.items():
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        full_env.pop("HPENGINE_DEBUG", None)  # only the jobs that ask for it
        full_env.update(env or {})
        procs[key] = (subprocess.Popen([sys.executable, "-m", "hpengine.cli", *map(str, args)], cwd=cwd,
                                       env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       preexec_fn=_as_from_a_shell), args)
    out = {}
    for key, (proc, args) in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        out[key] = subprocess.CompletedProcess(list(args), proc.returncode, stdout, stderr)
    return out


@pytest.fixture(scope="module")
def process_runs(built, tmp_path_factory):
    """SUBPROCESS_CASES and the debug traceback as real processes, started together:
    ``{name: (folder, before, run)}`` (``"<debug>"``: ``add`` without corpus= under HPENGINE_DEBUG=1)."""
    root = tmp_path_factory.mktemp("processes")
    folders = {name: copy_work(built, root / str(i)) for i, name in enumerate(SUBPROCESS_CASES)}
    before = {name: checksum(w / "idx") for name, w in folders.items()}
    jobs = {name: ([a.format(w=w) for a in CASES[name][0]], w, None) for name, w in folders.items()}
    debug = copy_work(built, root / "debug")
    jobs["<debug>"] = (["add", f"out={debug / 'idx'}"], debug, {"HPENGINE_DEBUG": "1"})
    runs = cli_many(jobs)
    out = {name: (folders[name], before[name], runs[name]) for name in SUBPROCESS_CASES}
    out["<debug>"] = (debug, None, runs["<debug>"])
    return out


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_bad_input_in_a_real_process_exits_2_without_traceback(process_runs, name):
    w, before, run = process_runs[name]
    assert run.returncode == 2
    assert_user_error(run, *CASES[name][1])
    assert checksum(w / "idx") == before


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_error_and_index_unchanged(table_runs, name):
    w, before, run, after = table_runs[name]
    assert_user_error(run, *CASES[name][1])
    assert after == before
    assert not (w / "nothing").exists()


def corrupt_index_json_list(idx):
    write(idx / "index.json", [1, 2])


def corrupt_texts_without_passages(idx):
    texts = json.loads((idx / "gen-000001" / "texts.json").read_text())
    del texts["passages"]
    write(idx / "gen-000001" / "texts.json", texts)


def corrupt_texts_invalid(idx):
    write(idx / "gen-000001" / "texts.json", '{"passages": [')


def corrupt_tensors_truncated(idx):
    data = (idx / "gen-000001" / "tensors.safetensors").read_bytes()
    write(idx / "gen-000001" / "tensors.safetensors", data[: len(data) // 2])


def _edit_tensor(idx, name, fn):
    tensors = load_file(str(idx / "gen-000001" / "tensors.safetensors"))
    tensors[name] = fn(tensors[name])
    save_file(tensors, str(idx / "gen-000001" / "tensors.safetensors"))


def corrupt_fact_passage_range(idx):
    _edit_tensor(idx, "fact_passage", lambda t: t + 100)


def corrupt_entity_range(idx):
    _edit_tensor(idx, "fact_entity_raw", lambda t: torch.stack([t[0], t[1] + 10_000]))


def corrupt_nan_embedding(idx):
    _edit_tensor(idx, "fact_emb", lambda t: t.index_fill(0, torch.tensor([0]), float("nan")))


def corrupt_extra_fact_text(idx):
    texts = json.loads((idx / "gen-000001" / "texts.json").read_text())
    texts["facts"].append("an extra fact")
    write(idx / "gen-000001" / "texts.json", texts)


def corrupt_passage_not_object(idx):
    texts = json.loads((idx / "gen-000001" / "texts.json").read_text())
    texts["passages"][0] = "just a string"
    write(idx / "gen-000001" / "texts.json", texts)


CORRUPTIONS = {
    corrupt_index_json_list: "index.json", corrupt_texts_without_passages: "texts.json",
    corrupt_texts_invalid: "texts.json", corrupt_tensors_truncated: "tensors.safetensors",
    corrupt_fact_passage_range: "fact_passage", corrupt_entity_range: "entities outside",
    corrupt_nan_embedding: "non-finite", corrupt_extra_fact_text: "fact_passage",
    corrupt_passage_not_object: r"passages\[0\]",
}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=lambda f: f.__name__)
def test_corrupted_index_is_refused_naming_the_file(work, corrupt):
    idx = work / "idx"
    corrupt(idx)
    from hpengine.graph import IndexFormatError

    with pytest.raises(IndexFormatError, match=CORRUPTIONS[corrupt]) as exc:  # in process: fast
        Index.load(idx)
    assert str(idx) in str(exc.value)
    if corrupt in (corrupt_index_json_list, corrupt_nan_embedding):  # and through the CLI
        before = checksum(idx)
        assert_user_error(cli_in_process("add", f"corpus={work / 'more.jsonl'}", f"out={idx}", *FAST),
                          CORRUPTIONS[corrupt], str(idx))
        assert checksum(idx) == before


def test_debug_shows_the_traceback(work, process_runs):
    run = process_runs["<debug>"][2]  # `hpengine add` without corpus= under HPENGINE_DEBUG=1, a real process
    assert run.returncode != 0 and "Traceback" in run.stderr and "UserError" in run.stderr
    run = cli_in_process("add", f"out={work / 'idx'}", "debug=true")  # the error escapes the front door
    assert run.returncode != 0 and "Traceback" in run.stderr and "UserError" in run.stderr


def test_tiny_index_answers_a_question_with_equals_sign(work):
    # one passage, two facts: seeds, subgraph and frontier larger than the graph shrink to it
    one = write(work / "one.json", CORPUS[:1])
    run = cli_in_process("index", f"corpus={one}", f"out={work / 'one'}", *FAST)
    assert run.returncode == 0, run.stderr
    run = cli_in_process("ask", work / "one", "Which film has E=mc2 in it?", *FAST)
    assert run.returncode == 0, run.stderr
    assert "Q: Which film has E=mc2 in it?" in run.stdout and "hop 2" in run.stdout


@pytest.mark.parametrize("args, expected", [
    (["IDX", "Which film has E=mc2 in it?"], ("IDX", "Which film has E=mc2 in it?", [])),
    (["IDX", "-who?", "model.llm=/m", "retriever=dense"], ("IDX", "-who?", ["model.llm=/m", "retriever=dense"])),
    (["+eval.x=1", "IDX", "--help"], ("IDX", "--help", ["+eval.x=1"])),
    (["IDX", "E=mc2"], ("IDX", "E=mc2", [])),  # E is no config key
    (["engine=dense", "IDX", "--", "engine=what?"], ("IDX", "engine=what?", ["engine=dense"])),
    (["IDX", "--", "-m", ], ("IDX", "-m", [])),
])
def test_ask_argument_rule(args, expected):
    from hpengine.cli import split_ask_args

    assert split_ask_args(args, {"model", "engine", "eval", "retriever", "index"}) == expected


def test_eval_output_is_strict_json_with_gold_warnings(work):
    questions = [*QUESTIONS, {"question": "Who is Ann Berg?", "answer": ["a director"]},
                 {"question": "Where is Bergen?", "answer": ["Norway"],
                  "gold_passages": [{"title": "Nowhere", "text": "not in the index"}]}]
    write(work / "q3.json", questions)
    out = work / "out" / "eval.json"
    run = cli_in_process("eval", f"index={work / 'idx'}", f"questions={work / 'q3.json'}", f"output={out}", *FAST)
    assert run.returncode == 0, run.stderr
    assert "1 of 3 questions have no gold passages" in run.stderr
    assert "1 of 3 questions have gold passages that are not in the index" in run.stderr

    def no_constants(token):
        raise AssertionError(f"non-strict JSON constant {token}")

    result = json.loads(out.read_text(), parse_constant=no_constants)
    assert result["questions_without_gold"] == 1 and result["questions_with_gold_not_in_index"] == 1
    assert result["records"][1]["recall@2"] is None and isinstance(result["recall@2"], float)


KILLS = [("index", "before-commit"), ("index", "after-commit"), ("add", "before-commit"), ("add", "after-commit")]
SHARD_KILL = ("index-shards", "after-shard")
#: Ctrl-C and SIGTERM after the first shard of a first build: its finished shard stays
SHARD_SIGNALS = [("index-shards", "after-shard:SIGINT"), ("index-shards", "after-shard:SIGTERM")]


def _kill_args(command, work):
    idx = work / "idx"
    if command == "index-shards":  # the built-in corpus (40 passages) in 3 shards, into a new folder
        return ["index", f"corpus={builtin_corpus_path()}", f"out={work / 'fresh'}", "shard_size=15"]
    if command == "index":
        return ["index", f"corpus={work / 'more.jsonl'}", f"out={idx}", "overwrite=true"]
    return ["add", f"corpus={work / 'more.jsonl'}", f"out={idx}"]


@pytest.fixture(scope="module")
def killed_runs(built, tmp_path_factory):
    """Each (command, point) of KILLS in its own copy of the index, the processes started together:
    ``{(command, point): (folder, passages before, names beside before, run)}``."""
    root = tmp_path_factory.mktemp("killed")
    folders = {case: copy_work(built, root / f"{case[0]}-{case[1].replace(':', '-')}" / "w")
               for case in KILLS + [SHARD_KILL] + SHARD_SIGNALS}
    old = {case: Index.load(w / "idx").num_passages for case, w in folders.items()}
    beside = {case: sorted(os.listdir(w)) for case, w in folders.items()}
    runs = cli_many({case: ([*_kill_args(case[0], w), *FAST], w, {"HPENGINE_TEST_KILL_AT": case[1]})
                     for case, w in folders.items()})
    return {case: (folders[case], old[case], beside[case], runs[case]) for case in KILLS + [SHARD_KILL] + SHARD_SIGNALS}


@pytest.mark.parametrize("command, point", KILLS)
def test_kill_9_during_save_keeps_a_complete_index(killed_runs, command, point):
    work, old_passages, beside, run = killed_runs[(command, point)]
    idx = work / "idx"
    args = _kill_args(command, work)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert sorted(os.listdir(work)) == beside  # nothing is ever written beside the index folder
    loaded = Index.load(idx)  # a reader: changes nothing
    new_passages = {"index": 1, "add": old_passages + 1}[command]
    expected = old_passages if point == "before-commit" else new_passages
    assert loaded.num_passages == expected
    if point == "before-commit":  # the next writer (in this process) works over what the kill left, and clears it
        assert any(n.startswith("gen-") for n in os.listdir(idx) if n != "gen-000001")
        run = cli_in_process(*args, *FAST)
        assert run.returncode == 0, run.stderr
        assert Index.load(idx).num_passages == new_passages
        generations = sorted(n for n in os.listdir(idx) if n.startswith(("gen-", ".tmp-")))
        assert len(generations) == 2, generations  # the new one and the one before it


def test_a_killed_streaming_build_resumes_from_its_finished_shard(killed_runs, tmp_path):
    """kill -9 after the first of three shards: no index yet, the shard kept in the build folder;
    the same command again extracts and embeds only the other two and gives the one-piece index."""
    work, _, _, run = killed_runs[SHARD_KILL]
    fresh = work / "fresh"
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert not (fresh / "index.json").exists()
    assert sorted(n for n in os.listdir(fresh / ".build") if n.startswith("shard-")) == \
        ["shard-000000.json", "shard-000000.safetensors"]
    run = cli_in_process(*_kill_args(*SHARD_KILL[:1], work), *FAST)
    assert run.returncode == 0, run.stderr
    resumed = Index.load(fresh)
    report = resumed.meta["build_report"]
    assert (report["shards"], report["resumed_shards"]) == (3, 1)
    assert not (fresh / ".build").exists()  # removed once the build committed
    whole = cli_in_process("index", f"corpus={builtin_corpus_path()}", f"out={tmp_path / 'whole'}",
                           "shard_size=0", *FAST)
    assert whole.returncode == 0, whole.stderr
    want = Index.load(tmp_path / "whole")
    assert (resumed.passages, resumed.facts, resumed.entities) == (want.passages, want.facts, want.entities)
    assert torch.equal(resumed.fact_entity_raw, want.fact_entity_raw)
    for name in ("fact_emb", "passage_emb", "entity_emb"):  # the encoder batched other texts together
        assert torch.allclose(getattr(resumed, name), getattr(want, name), atol=1e-5), name


@pytest.mark.parametrize("case", SHARD_SIGNALS, ids=lambda c: c[1].split(":")[1])
def test_an_interrupted_first_build_keeps_its_finished_shard_and_resumes(killed_runs, case):
    """Ctrl-C (one line, status 130) or SIGTERM after the first of three shards of a build into a
    new folder: the folder and its finished shard stay, and the same command resumes from it."""
    work, _, _, run = killed_runs[case]
    fresh = work / "fresh"
    if case[1].endswith("SIGINT"):
        assert run.returncode == 130, run.stderr
        assert run.stderr.strip().splitlines()[-1].startswith("hpengine: interrupted")
    else:
        assert run.returncode == -signal.SIGTERM, run.stderr
    assert not (fresh / "index.json").exists()
    assert sorted(n for n in os.listdir(fresh / ".build") if n.startswith("shard-")) == \
        ["shard-000000.json", "shard-000000.safetensors"]
    run = cli_in_process(*_kill_args("index-shards", work), *FAST)
    assert run.returncode == 0, run.stderr
    report = Index.load(fresh).meta["build_report"]
    assert (report["shards"], report["resumed_shards"], report["redone_shards"]) == (3, 1, [])


def test_kill_9_mid_work_leaves_index_unchanged(work):
    idx = work / "idx"
    before = checksum(idx)
    proc = subprocess.Popen([sys.executable, "-m", "hpengine.cli", "add", f"corpus={work / 'more.jsonl'}",
                             f"out={idx}", *FAST], cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    time.sleep(2.5)  # loading models / extracting: before the save
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert checksum(idx) == before


# ------------------------------------------------ nothing lost: reads, overwrites, outputs
def main_in_process(capsys, *args) -> tuple:
    """``(exit status, stderr)`` of ``hpengine ARGS`` run in this process (fast: no start-up)."""
    from hpengine.cli import main

    try:
        main([str(a) for a in args])
        status = 0
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


def tree(folder) -> dict:
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def test_reads_and_the_grag_build_leave_a_users_backup_alone(work, capsys, monkeypatch):
    idx, bak = work / "idx", work / "idx.bak"
    shutil.copytree(idx, bak)  # what people do before overwrite=true
    (bak / "why.txt").write_text("my copy from Tuesday")
    before = tree(bak)
    monkeypatch.delenv("HPENGINE_DEBUG", raising=False)
    assert main_in_process(capsys, "ask", idx, "Where was the director of Solo born?", *FAST)[0] == 0
    status, err = main_in_process(capsys, "eval", f"index={idx}", f"questions={work / 'questions.json'}",
                                  f"output={work / 'run.json'}", *FAST)
    assert status == 0, err
    Index.load(idx)
    from hpengine.jobs.grag_build import main as grag_main

    assert grag_main([str(idx)]) == 0
    assert Index.load(idx).grag is not None
    assert tree(bak) == before and Index.load(bak).grag is None


def test_overwrite_refuses_a_user_folder_that_merely_holds_an_index_json(work, capsys):
    user = work / "results"
    (user / "plots").mkdir(parents=True)
    (user / "plots" / "fig1.svg").write_text("<svg/>")
    (user / "index.json").write_text('{"title": "my own index of results"}')
    before = tree(user)
    status, err = main_in_process(capsys, "index", f"corpus={work / 'corpus.json'}", f"out={user}", "overwrite=true",
                                  *FAST)
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("hpengine: error: ") and "not an hpengine index" in err and "Traceback" not in err
    assert tree(user) == before


@pytest.mark.parametrize("target", ["questions", "index.json", "texts.json", "checkpoint", "checkpoint=questions"])
def test_an_output_on_an_input_is_refused_before_any_work(work, capsys, target):
    idx = work / "idx"
    questions, ckpt = work / "questions.json", work / "run.jsonl"
    ckpt.write_text("")
    output = {"questions": questions, "index.json": idx / "index.json", "texts.json": idx / "gen-000001" / "texts.json",
              "checkpoint": ckpt, "checkpoint=questions": work / "out.json"}[target]
    extra = [f"eval.checkpoint={questions if target == 'checkpoint=questions' else ckpt}"]
    before = (tree(idx), questions.read_bytes(), ckpt.read_bytes())
    status, err = main_in_process(capsys, "eval", f"index={idx}", f"questions={questions}", f"output={output}",
                                  *extra, *FAST)
    assert status == 2 and err.count("\n") == 1 and err.startswith("hpengine: error: "), err
    assert (tree(idx), questions.read_bytes(), ckpt.read_bytes()) == before


@pytest.mark.parametrize("args", [("index", "corpus=corpus.json", "out=."), ("add", "corpus=more.jsonl", "out=."),
                                  ("ask", ".", "Who?")])
def test_the_current_folder_as_index_is_one_line(work, capsys, monkeypatch, args):
    monkeypatch.chdir(work)
    before = sorted(os.listdir(work))
    status, err = main_in_process(capsys, *args, *FAST)
    assert status == 2 and err.count("\n") == 1 and err.startswith("hpengine: error: "), err
    assert sorted(os.listdir(work)) == before


def test_two_concurrent_adds_keep_both_sets_of_passages(work):
    idx = work / "idx"
    write(work / "b.jsonl", json.dumps({"title": "Trondheim", "text": "Trondheim is a city in Norway."}) + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [subprocess.Popen([sys.executable, "-m", "hpengine.cli", "add", f"corpus={work / name}",
                               f"out={idx}", *FAST], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("more.jsonl", "b.jsonl")]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    titles = {p.title for p in Index.load(idx).passages}
    assert {"Oslo", "Trondheim"} <= titles and len(titles) == len(CORPUS) + 2


@pytest.mark.parametrize("argv, needle", [([], "index folder first"), (["nowhere"], "no such index folder"),
                                          (["IDX", "louvain_seed=x"], "louvain_seed= must be an int"),
                                          (["IDX", "frobnicate=1"], "unknown grag-build key"),
                                          (["IDX", "lock_timeout=nan"], "lock_timeout= must be a finite number")])
def test_grag_build_errors_are_one_line_with_exit_2(work, capsys, monkeypatch, argv, needle):
    from hpengine.jobs.grag_build import main as grag_main

    monkeypatch.delenv("HPENGINE_DEBUG", raising=False)
    before = tree(work / "idx")
    status = grag_main([str(work / "idx") if a == "IDX" else str(work / a) if a == "nowhere" else a for a in argv])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("hpengine: error: ") and needle in err, err
    assert tree(work / "idx") == before


def test_a_deleted_key_set_again_is_not_a_repeat():
    """``~key`` deletes a value and ``+key=`` sets one: together they are not a key given twice."""
    from hpengine._commands import check_overrides
    from hpengine.errors import UserError

    check_overrides("eval", ["index=idx", "questions=q.json", "~eval.checkpoint", "+eval.checkpoint=c.jsonl"])
    with pytest.raises(UserError, match="eval.checkpoint= is given twice"):
        check_overrides("eval", ["index=idx", "questions=q.json", "eval.checkpoint=a", "++eval.checkpoint=b"])
