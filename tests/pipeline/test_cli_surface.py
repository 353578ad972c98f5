"""The command line's surface: each command's --help lists its own keys with docs and the defaults
its config composes to (no torch, no Hydra, no YAML dump); the index folder is the first argument
of every command that takes one; an unknown key names the closest; a key a command would ignore
is refused; a value given on the command line is never interpolated; ``ask IDX`` with no question
reads questions one at a time with the engine loaded once; the interrupt message says which
commands may simply run again."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from hpengine._commands import COMMANDS, command_keys, conf_dir, shown_default
from hpengine.cli import _kept, main
from hpengine.config import doc_summary
from hpengine.graph import builtin_corpus_path, builtin_questions_path

HEAVY = ("torch", "transformers", "hydra", "omegaconf")
FAST = ["encoder.dtype=float32"]
ODD_TITLE = "${oc.env:HOME}"  # a title that OmegaConf would read as an interpolation


def _python(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, **kwargs)


def run(capsys, *args) -> tuple:
    """``(exit status, stdout, stderr)`` of ``hpengine ARGS`` in this process."""
    try:
        main([str(a) for a in args])
        status = 0
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --------------------------------------------------------------------- help
@pytest.fixture(scope="module")
def helps():
    """``{command: completed process}`` of ``python -X importtime -m hpengine.cli COMMAND --help``."""
    return {c: _python("-X", "importtime", "-m", "hpengine.cli", c, "--help") for c in COMMANDS}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_lists_the_commands_keys_with_docs_and_defaults(helps, command):
    proc = helps[command]
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert text.startswith(f"usage: hpengine {command}")
    keys = command_keys(command)
    assert keys
    unwrapped = " ".join(text.split())
    for key in keys:
        if key.name == COMMANDS[command].positional:
            continue  # the IDX line names it
        shown = shown_default(command, key)
        assert re.search(rf"^  {re.escape(key.name)}={re.escape(shown)}\s", text, re.M), key.name
        assert " ".join(doc_summary(key.doc).split()) in unwrapped, key.name
    assert "defaults:" not in text and "_target_" not in text  # not a YAML dump
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:[^|]*\|[^|]*\|\s*([\w.]+)\s*$",
                                                              proc.stderr, re.M)}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_help_shows_overwrite_where_taken_and_no_refused_key(helps):
    assert re.search(r"^  overwrite=false\s", helps["index"].stdout, re.M)
    assert re.search(r"^  overwrite=false\s", helps["demo"].stdout, re.M)
    assert "overwrite=" not in helps["add"].stdout
    assert not re.search(r"^  titles=", helps["update"].stdout, re.M)
    assert re.search(r"^  titles=null\s", helps["delete"].stdout, re.M)
    for key in ("output", "eval.checkpoint", "eval.recall_ks", "index"):
        assert not re.search(rf"^  {re.escape(key)}=", helps["ask"].stdout, re.M), key
    assert not re.search(r"^  grag\.", helps["add"].stdout, re.M)


def test_help_of_another_method_lists_its_settings(capsys):
    status, out, _ = run(capsys, "eval", "--help", "retriever=ppr")
    assert status == 0 and re.search(r"^  engine\.damping=0\.5\s", out, re.M) and "engine.num_hops" not in out
    assert "retrieval.faiss_nprobe=" in out and "retrieval.top_k=" not in out  # PPR runs no HyperProve hop
    status, out, _ = run(capsys, "eval", "--help")
    assert re.search(r"^  engine\.num_hops=2\s", out, re.M) and "engine.damping" not in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_key_has_a_doc(command):
    assert [k.name for k in command_keys(command) if not doc_summary(k.doc)] == []


@pytest.mark.parametrize("command", [c for c, spec in COMMANDS.items() if spec.conf])
def test_help_defaults_are_what_the_config_composes_to(command):
    """The defaults --help shows (read from the dataclasses and conf/ without Hydra) equal Hydra's
    composition of the command's config."""
    from omegaconf import OmegaConf

    from hpengine.cli import _compose
    from hpengine.config import register_configs

    register_configs()
    composed = OmegaConf.to_container(_compose(COMMANDS[command].conf, []), resolve=False)
    composed.pop("hydra", None)

    def leaf(tree, dotted):
        for part in dotted.split("."):
            tree = tree[part]
        return tree

    for key in command_keys(command):
        assert leaf(composed, key.name) == key.default, key.name


# ------------------------------------------------------------ key checks
@pytest.mark.parametrize("args, needle", [
    (["index", "IDX", "corpus=c.json", "graph.synonym_treshold=0.5"], "did you mean graph.synonym_threshold?"),
    (["eval", "IDX", "questions=q.json", "retrieval.top_kk=3"], "did you mean retrieval.top_k?"),
    (["eval", "IDX", "questions=q.json", "engine.num_hop=3"], "did you mean engine.num_hops?"),
    (["eval", "IDX", "questions=q.json", "retriever=ppr", "engine.dampin=0.3"], "did you mean engine.damping?"),
    (["delete", "IDX", "titel=[A]"], "did you mean titles?"),
    (["add", "IDX", "corpsu=c.json"], "did you mean corpus?"),
    (["demo", "encoder.max_len=3"], "did you mean encoder.max_length?"),
    (["ask", "IDX", "Who?", "eval.max_question=3"], "did you mean eval.max_questions?"),
    (["grag-build", "IDX", "louvain_sed=1"], "did you mean louvain_seed?"),
    (["report", "run.json", "titel=x"], "did you mean title?"),
    (["evl", "IDX"], "did you mean eval?"),
    (["eval", "IDX", "retriever=pprr"], "did you mean ppr?"),
])
def test_an_unknown_key_names_the_closest_in_one_line(capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, *args)
    assert status == 2 and err.startswith("hpengine: error: ") and err.count("\n") == 1, err
    assert needle in err, err


@pytest.mark.parametrize("args, needle", [
    (["ask", "IDX", "questions=q.json", "output=out.json"], "ask does not take output="),
    (["ask", "IDX", "Who?", "eval.checkpoint=c.jsonl"], "ask does not take eval.checkpoint="),
    (["ask", "IDX", "Who?", "eval.recall_ks=[1]"], "ask does not take eval.recall_ks="),
    (["ask", "Who?", "index=IDX"], "ask does not take index="),
    (["update", "IDX", "corpus=c.json", "titles=[A]"], "update does not take titles="),
    (["add", "IDX", "corpus=c.json", "grag.build=true"], "add does not take grag.build="),
    (["add", "IDX", "corpus=c.json", "shard_size=5"], "add does not take shard_size="),
    (["add", "IDX", "corpus=c.json", "overwrite=true"], "overwrite= applies to index and demo only"),
    (["eval", "IDX", "questions=q.json", "encoder.max_length=64"], "encoder.max_length= would be ignored"),
    (["ask", "IDX", "Who?", "encoder=index", "encoder.pooling=cls"], "encoder.pooling= would be ignored"),
    (["update", "IDX", "corpus=c.json", "encoder.query_prompt=q"], "encoder.query_prompt= would be ignored"),
    (["eval", "IDX", "questions=q.json", "retriever=dense", "retrieval.top_k=3"], "retriever=dense does not run"),
    (["demo", "retriever=ppr,grag", "retrieval.alpha=0.5"], "retriever=ppr does not run"),
    (["eval", "IDX", "questions=q.json", "engine.ranker=r.safetensors"],
     "engine.ranker= is a setting of retriever=learned, not of retriever=hyperprove, which would ignore it; add "
     "retriever=learned"),
    (["eval", "IDX", "questions=q.json", "retriever=fusion", "engine.ranker=r.safetensors"],
     "not of retriever=fusion"),
    (["ask", "IDX", "Who?", "model.batch_size=4"], "model.batch_size= is read only with an LLM"),
    (["demo", "extractor.llm_batch_size=4"], "is read only with the LLM extractor"),
    (["index", "IDX", "corpus=c.json", "grag.triples=llm"], "is read only with grag.build=true"),
    (["demo", "extractor=llm"], "extractor=llm needs extractor.llm_model=PATH"),
    (["eval", "A", "B", "questions=q.json"], "eval takes one index folder"),
    (["eval", "A", "index=B", "questions=q.json"], "got 'A' and index='B'"),
    (["eval", "A", "index=B", "index=A", "questions=q.json"], "got 'A' and index='B'"),  # not only the last
    (["demo", "somewhere"], "demo takes no positional argument"),
])
def test_a_key_the_command_would_ignore_is_refused(capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPENGINE_LLM", raising=False)  # conf/extractor/llm.yaml's default model
    status, _, err = run(capsys, *args)
    assert status == 2 and err.count("\n") == 1 and needle in err, err


# ------------------------------------------------- commands on a small index
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A seven-passage index built with the positional form ``hpengine index IDX corpus=...``;
    one title is ``${oc.env:HOME}``."""
    work = tmp_path_factory.mktemp("surface")
    records = json.loads(builtin_corpus_path().read_text())[:6]
    records.append({"title": ODD_TITLE, "text": "A passage titled like an interpolation of the home folder."})
    (work / "corpus.json").write_text(json.dumps(records))
    (work / "one.json").write_text(json.dumps([{"title": "Kellen Mire", "text": "Kellen Mire is a marsh east of "
                                                                               "Brenholt, home to herons."}]))
    questions = json.loads(builtin_questions_path().read_text())[:3]
    (work / "q.json").write_text(json.dumps(questions))
    main(["index", str(work / "idx"), f"corpus={work / 'corpus.json'}", *FAST])
    return work


def _copy(small, tmp_path):
    shutil.copytree(small / "idx", tmp_path / "idx")
    return tmp_path / "idx"


def _titles(path) -> list:
    from hpengine.graph import Index

    return [p.title for p in Index.load(path).passages]


def test_the_index_comes_first_for_every_command(small, tmp_path, capsys):
    idx = _copy(small, tmp_path)
    assert len(_titles(idx)) == 7
    status, out, err = run(capsys, "eval", idx, f"questions={small / 'q.json'}", "retriever=dense")
    assert status == 0 and "recall@5" in out, err
    status, _, err = run(capsys, "add", idx, f"corpus={small / 'one.json'}", *FAST)
    assert status == 0 and "Kellen Mire" in _titles(idx), err
    (tmp_path / "new.json").write_text(json.dumps([{"title": "Kellen Mire", "text": "Kellen Mire is a wet meadow."}]))
    status, out, err = run(capsys, "update", idx, f"corpus={tmp_path / 'new.json'}")
    assert status == 0 and "Kellen Mire" in _titles(idx), err
    status, _, err = run(capsys, "delete", idx, "titles=[Kellen Mire]")
    assert status == 0 and "Kellen Mire" not in _titles(idx) and len(_titles(idx)) == 7, err
    status, _, err = run(capsys, "delete", f"out={idx}", f"titles=[{_titles(idx)[0]}]")  # the key form still works
    assert status == 0 and len(_titles(idx)) == 6, err


def test_a_command_line_value_is_never_interpolated(small, tmp_path, capsys):
    idx = _copy(small, tmp_path)
    assert ODD_TITLE in _titles(idx)
    status, _, err = run(capsys, "delete", idx, f"titles=[{ODD_TITLE}]")
    assert status == 0, err
    assert ODD_TITLE not in _titles(idx) and len(_titles(idx)) == 6
    status, _, err = run(capsys, "add", idx, "corpus=${oc.env:HOME}")
    assert status == 2 and "'${oc.env:HOME}'" in err and os.environ.get("HOME", "/") not in err.replace(
        "${oc.env:HOME}", ""), err


def test_hydra_flags_keep_working_with_the_positional_index(tmp_path):
    proc = _python("-m", "hpengine.cli", "delete", str(tmp_path / "idx"), f"titles=[{ODD_TITLE}]", "--cfg", "job",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"out: {tmp_path / 'idx'}" in proc.stdout and "${oc.env:HOME}" in proc.stdout
    assert os.environ.get("HOME", "~") + "\n" not in proc.stdout


def test_ask_honours_max_questions(small, capsys):
    status, out, err = run(capsys, "ask", small / "idx", f"questions={small / 'q.json'}", "eval.max_questions=2",
                           "retriever=dense")
    assert status == 0 and out.count("Q: ") == 2, err


def test_ask_without_a_question_reads_them_one_at_a_time(small):
    """Each question is answered before the next line is read; an empty line ends the session."""
    proc = _python("-m", "hpengine.cli", "ask", str(small / "idx"), "retriever=dense", *FAST,
                   input="Who directed Glass Orchard?\nWhere was Tomas Venn born?\n\nNot read?\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    questions = re.findall(r"^Q: (.*)$", proc.stdout, re.M)
    assert questions == ["Who directed Glass Orchard?", "Where was Tomas Venn born?"]
    assert "index loaded" in proc.stderr and proc.stderr.count("question> ") == 3
    proc = _python("-m", "hpengine.cli", "ask", str(small / "idx"), "retriever=dense", *FAST,
                   input="Who directed Glass Orchard?\n\xff\nWhere was Tomas Venn born?")  # EOF ends it too
    assert proc.returncode == 0 and len(re.findall(r"^Q: ", proc.stdout, re.M)) == 3, proc.stderr[-2000:]


def test_ask_refuses_undecodable_stdin_in_one_line(small):
    proc = subprocess.run([sys.executable, "-m", "hpengine.cli", "ask", str(small / "idx"), "-"],
                          input=b"Who?\n\xff\xfe\n", capture_output=True, timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "line 2 of stdin is not UTF-8 text" in err and "Traceback" not in err, err


def test_add_refuses_a_locked_index_before_loading_its_encoder(small, tmp_path, capsys, monkeypatch):
    import hpengine.jobs._index as index_job
    from hpengine.graph import IndexStore

    idx = _copy(small, tmp_path)

    def no_model(*args, **kwargs):
        raise AssertionError("the encoder loaded before the lock was taken")

    monkeypatch.setattr(index_job, "make_encoder", no_model)
    with IndexStore(str(idx)).writer(timeout=0, command="test"):
        status, _, err = run(capsys, "add", idx, f"corpus={small / 'one.json'}", "lock_timeout=0")
    assert status == 2 and "being written" in err, err


# ----------------------------------------------------------- interrupts
@pytest.mark.parametrize("command, args, needle", [
    ("index", ["out=IDX", "corpus=c.json"], "resume from the finished shards"),
    ("add", ["out=IDX", "corpus=c.json"], "safe to rerun"),
    ("delete", ["out=IDX", "titles=[A]"], "safe to rerun"),
    ("delete", ["out=IDX", "corpus=c.json"], "safe to rerun"),
    ("delete", ["out=IDX", "ids=[3]"], "safe to rerun: if the delete finished, the rerun sees it is the index's last"),
    ("delete", ["out=IDX", "ids=[3]", "expect_generation=4"], "safe to rerun"),
    ("update", ["out=IDX", "corpus=c.json"], "safe to rerun"),
    ("eval", ["index=IDX", "questions=q.json", "eval.checkpoint=c.jsonl"], "rerun the same command to resume"),
    ("ask", ["engine=dense"], "writes nothing"),
])
def test_the_interrupt_message_says_whether_a_rerun_is_safe(command, args, needle):
    assert needle in _kept(command, args)


def test_reference_pages_exist_for_every_command():
    text = (conf_dir().parent / "docs" / "reference" / "cli.md").read_text()
    for command in COMMANDS:
        assert f"## hpengine {command}\n" in text, command
