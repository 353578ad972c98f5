"""The commands of the ``hpengine`` command line as data: what each does, its shape, the keys it
takes (walked from its config dataclass, each with the field's ``#:`` doc and the default that
its ``conf/<name>.yaml`` composes to), and the keys it refuses. From these come every command's
``--help``, the check of every key before anything is composed (an unknown key names the
closest one), and the reference pages docs/reference/cli.md and config.md
(:func:`reference_pages`).

Imports the config dataclasses and PyYAML only: no torch, no Hydra, so ``--help`` answers at
once.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

from hpengine.config import (DemoJobConfig, EditJobConfig, EvalJobConfig, GragBuildConfig, IndexConfig, Key,
                             ReportConfig, TrainJobConfig, config_keys, doc_summary, field_doc, format_value,
                             method_configs)

WIDTH = 100


class Command(NamedTuple):
    """One command: ``what`` it does (a short phrase), ``usage``, ``notes`` (a paragraph), its
    config ``schema``, the ``conf`` file composed (``None``: the command reads its own keys),
    the key its positional argument ``positional`` sets, the ``options`` read by the command line
    itself, and the keys it ``refuses`` (``{key or prefix.*: why}``) although its schema has them."""

    what: str
    usage: str
    notes: str
    schema: type
    conf: str | None
    positional: str | None
    options: tuple = ("debug",)
    refuses: dict = {}


COMMANDS = {
    "index": Command(
        "build an index", "hpengine index IDX corpus=PATH [key=value ...]",
        "Extracts the corpus's atomic facts, embeds them and writes the index folder IDX. An existing index at "
        "IDX is replaced only with overwrite=true, and only once the new one is complete. A stopped build "
        "resumes from its finished shards when the same command runs again.",
        IndexConfig, "index", "out", ("overwrite", "debug")),
    "add": Command(
        "add passages", "hpengine add IDX corpus=PATH [key=value ...]",
        "Adds the corpus's passages to the index IDX in place: only the new passages are extracted and "
        "embedded. Use the extractor and encoder the index was built with.",
        IndexConfig, "index", "out",
        refuses={"embed_passages": "add follows the index's own setting",
                 "shard_size": "add extracts its passages in one piece",
                 "grag.*": "add drops an index's GRAG-MH parts; rebuild them with hpengine grag-build IDX"}),
    "delete": Command(
        "remove passages", "hpengine delete IDX corpus=PATH | titles=[T,...] | ids=[I,...] [key=value ...]",
        "corpus records match by title and text, else by a title one passage has; titles= takes every passage "
        "with the title; ids are positions in the index. The result equals a fresh index of the remaining "
        "passages; the others are not extracted or embedded again.",
        EditJobConfig, "edit", "out"),
    "update": Command(
        "new passage texts", "hpengine update IDX corpus=PATH [ids=[I,...]] [key=value ...]",
        "Each record replaces the passage with its title (or with ids=, one per record); only those are "
        "extracted and embedded again, and the result equals a fresh index of the edited corpus.",
        EditJobConfig, "edit", "out",
        refuses={"titles": "update matches its records by title, or by ids= (one per record); titles= is for "
                           "delete"}),
    "ask": Command(
        "questions", 'hpengine ask IDX ["question" | - | questions=FILE] [key=value ...] [-- "question"]',
        "Prints the ranked passages and the evidence chain of each question; without model= the engine "
        "retrieves and names the best bridge entity, not an answer. With no question, ask reads questions "
        "from the terminal one at a time, the index loaded once (an empty line or Ctrl-D quits); - reads one "
        "question per line of stdin, questions=FILE a question file as eval takes. An argument is a key when "
        "it is KEY=VALUE with a KEY below; everything after -- is the question.",
        EvalJobConfig, "eval", "index",
        refuses={"index": "ask takes the index folder as its first argument: hpengine ask IDX ...",
                 "output": "ask prints its answers; hpengine eval IDX questions=FILE output=FILE writes records",
                 "eval.checkpoint": "ask keeps no checkpoint; hpengine eval does",
                 "eval.recall_ks": "ask scores nothing; hpengine eval reports Recall@k",
                 "eval.page_out": "ask keeps the index resident; hpengine eval pages it out"}),
    "eval": Command(
        "a question file", "hpengine eval IDX questions=PATH [retriever=METHOD] [output=FILE.json] [key=value ...]",
        "Answers every question of the file and reports Recall@k and EM/F1; output= writes the per-question "
        "records that hpengine report reads.",
        EvalJobConfig, "eval", "index"),
    "demo": Command(
        "built-in default", "hpengine demo [retriever=METHOD] [key=value ...]",
        "Indexes the built-in corpus (into a new temporary folder unless out=DIR), answers its questions and "
        "prints passages, chains and scores.",
        DemoJobConfig, "demo", None, ("overwrite", "debug")),
    "report": Command(
        "one HTML page", "hpengine report RUN.json [RUN2.json ...] [key=value ...]",
        "Compares eval runs (hpengine eval ... output=RUN.json) over the same questions on one HTML page.",
        ReportConfig, None, None),
    "train": Command(
        "a learned ranker",
        "hpengine train IDX questions=FILE [IDX2 questions=FILE2 ...] out=ranker.safetensors [key=value ...]",
        "Trains the ranker of retriever=learned on the candidates of each index's questions (their gold passages), "
        "validates it on a held-out share of the questions (or cross-validates it over folds=K, then trains on "
        "every question), and writes it with its feature schema and encoder; each questions= pairs with the index "
        "before it. Use it with retriever=learned engine.ranker=FILE.",
        TrainJobConfig, None, "index"),
    "grag-build": Command(
        "GRAG-MH parts", "hpengine grag-build IDX [key=value ...]",
        "Adds the triples, communities and summary nodes that retriever=grag needs to a saved index, "
        "atomically.",
        GragBuildConfig, None, "index", refuses={"build": "grag-build always builds; build is index's grag.build"}),
}

#: the command line's own options (not config keys): ``name -> (default, doc)``
OPTIONS = {
    "overwrite": (False, "Replace an existing index at the output folder (kept until the new one is complete)."),
    "debug": (False, "Show the traceback of an error (also HPENGINE_DEBUG=1)."),
}
#: config groups a command line can pick a preset of: ``name -> what a preset sets``
GROUPS = {"engine": "The retrieval method", "encoder": "Encoder preset", "extractor": "Fact extractor preset",
          "model": "LLM preset"}
#: keys a command takes besides its schema's: ``command -> {key: (default, doc)}``
EXTRA_KEYS = {"grag-build": {"lock_timeout": (60.0, "Seconds to wait while another process writes the same "
                                                    "index.")}}
#: the encoder fields that make an index's embedding space: with the index's own encoder (the preset
#: ``encoder=index``, the default of eval, ask, delete and update) they are read from the index
#: (hpengine.models.index_encoder_config), so setting one there would be ignored
INDEX_ENCODER_FIELDS = ("max_length", "pooling", "normalize", "query_prompt", "passage_prompt", "synonym_threshold",
                        "link_threshold")
#: the ``retrieval.*`` fields of the dense search, which every method uses; the others are the
#: HyperProve hop's, used by the methods that run one
DENSE_SEARCH_FIELDS = ("seed_backend", "approximate_min_keys", "faiss_nlist", "faiss_nprobe", "faiss_codes")
HOP_METHODS = ("hyperprove", "fusion")
#: keys read only when another setting is on: ``prefix -> (what turns them on, the keys that do)``;
#: without it a key under ``prefix`` would be ignored (the key that turns it on is not among them)
CONDITIONAL = {
    "model.": ("an LLM (model=qwen1.5b or model.llm=PATH)", ("model", "model.llm")),
    "extractor.llm_": ("the LLM extractor (extractor=llm)", ("extractor", "extractor.kind")),
    "extractor.cache_dir": ("the LLM extractor (extractor=llm)", ("extractor", "extractor.kind")),
    "extractor.on_reject": ("the LLM extractor (extractor=llm)", ("extractor", "extractor.kind")),
    "grag.": ("grag.build=true", ("grag.build",)),
}
_OFF = {"model": ("none", ""), "model.llm": ("", "null"), "extractor": ("fast",), "extractor.kind": ("fast",),
        "grag.build": ("false", "0", "no", "off")}
#: Hydra's command-line flags that take a value (``--cfg job``)
HYDRA_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun", "--shell-completion", "-sc"}
_INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
#: ``[+|++|~]key.path[@pkg]=value``: what Hydra reads as an override
OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w\-]*(?:[./][\w\-]+)*)(?:@[\w.\-]+)?"
                      r"(?P<eq>=|$)")


def conf_dir() -> Path:
    """The folder of the primary configs: ``conf/`` of a source checkout, else the installed
    ``hpengine.conf`` package."""
    repo_conf = Path(__file__).resolve().parents[1] / "conf"
    if (repo_conf / "index.yaml").exists():
        return repo_conf
    import hpengine.conf

    return Path(hpengine.conf.__file__).parent


def _yaml(path: Path) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def group_options(group: str) -> list:
    """The presets of a config group: ``engine``'s methods, else the YAML files of ``conf/<group>/``."""
    if group == "engine":
        return sorted(method_configs())
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def conf_defaults(conf: str) -> tuple:
    """``(group presets, values)`` that ``conf/<conf>.yaml`` composes on top of its schema:
    ``{group: preset}`` from its defaults list and the dotted values it and those presets set."""
    primary = _yaml(conf_dir() / f"{conf}.yaml")
    presets, values = {}, {}
    for entry in primary.get("defaults", []):
        if isinstance(entry, dict):
            (group, option), = entry.items()
            if not group.startswith("override ") and group in GROUPS:
                presets[group] = option
    for group, option in presets.items():
        path = conf_dir() / group / f"{option}.yaml"
        if path.exists():
            own = {k: v for k, v in _yaml(path).items() if k != "defaults"}
            values.update(_flatten(own, f"{group}."))
    values.update(_flatten({k: v for k, v in primary.items() if k not in ("defaults", "hydra")}))
    return presets, values


def method_of(command: str, overrides: list) -> str:
    """The method an eval/ask/demo command line picks (its last ``engine=`` / ``retriever=``), else
    its config's default."""
    picked = [a.split("=", 1)[1] for a in overrides if re.match(r"(?:\+\+|\+)?(?:engine|retriever)=", a)]
    if picked:
        return picked[-1]
    conf = COMMANDS[command].conf
    return conf_defaults(conf)[0].get("engine", "") if conf else ""


def command_keys(command: str, method: str | None = None) -> list:
    """The keys ``command`` takes, as :class:`~hpengine.config.Key` with the composed defaults
    (``engine.*`` those of ``method``, default: the command's default method); refused keys left
    out. Group presets and the command line's options are not among them."""
    spec = COMMANDS[command]
    presets, values = conf_defaults(spec.conf) if spec.conf else ({}, {})
    nested = {}
    if any(f.name == "engine" for f in dataclasses.fields(spec.schema)):
        methods = method_configs()
        nested["engine"] = methods.get(method or presets.get("engine", ""), methods["hyperprove"])
    keys = [k._replace(default=values.get(k.name, k.default)) for k in config_keys(spec.schema, nested=nested)]
    keys += [Key(name, default, spec.schema, doc) for name, (default, doc) in EXTRA_KEYS.get(command, {}).items()]
    picked = method or presets.get("engine", "")
    return [k for k in keys if refusal(command, k.name) is None and not _unused_hop_key(k.name, picked)]


def _switched_off(command: str, key: str, overrides: list) -> str:
    """What ``key`` needs turned on (:data:`CONDITIONAL`) when the command line leaves it off, else ``""``."""
    for prefix, (what, switches) in CONDITIONAL.items():
        if not key.startswith(prefix) or key in switches:
            continue
        presets = conf_defaults(COMMANDS[command].conf)[0] if COMMANDS[command].conf else {}
        defaults = {k.name: k.default for k in command_keys(command)}
        for switch in switches:
            given = [a.split("=", 1)[1] for a in overrides if re.match(rf"(?:\+\+|\+)?{re.escape(switch)}=", a)]
            value = given[-1] if given else presets.get(switch, defaults.get(switch))
            if value is None or "," in str(value) or str(value).strip().lower() not in _OFF[switch]:
                return ""  # on (or swept over): the key is read
        return what
    return ""


def _unused_hop_key(key: str, method: str) -> bool:
    """Whether ``key`` is a HyperProve hop setting that ``method`` (one that runs no hop) never reads."""
    return (bool(method) and method not in HOP_METHODS and key.startswith("retrieval.")
            and key.split(".", 1)[1] not in DENSE_SEARCH_FIELDS)


def refusal(command: str, key: str) -> str | None:
    """Why ``command`` refuses ``key`` (a key of its schema it would otherwise ignore), or None."""
    for pattern, why in COMMANDS[command].refuses.items():
        if key == pattern or (pattern.endswith(".*") and key.startswith(pattern[:-1])):
            return why
    return None


def command_groups(command: str) -> dict:
    """``{group: (default preset, presets)}`` of the groups ``command``'s config composes."""
    spec = COMMANDS[command]
    if not spec.conf:
        return {}
    presets = conf_defaults(spec.conf)[0]
    groups = {}
    for group, default in presets.items():
        options = group_options(group)
        if group == "encoder" and spec.conf in ("index", "demo"):
            options = [o for o in options if o != "index"]  # a new index has no encoder to follow yet
        groups[group] = (default, options)
    return groups


# ------------------------------------------------------------------ checks
def closest(word: str, choices) -> str:
    """``" (did you mean X?)"`` for the closest of ``choices`` to ``word``, else ``""``."""
    choices = sorted(set(choices))
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not found and "." in word:  # a right leaf under another parent: encoder.max_len -> encoder.max_length
        leaf = word.rsplit(".", 1)[1]
        found = difflib.get_close_matches(leaf, [c.rsplit(".", 1)[-1] for c in choices], n=1, cutoff=0.75)
        found = [c for c in choices if c.rsplit(".", 1)[-1] == found[0]][:1] if found else []
    return f" (did you mean {found[0]}?)" if found else ""


def _nodes(keys) -> set:
    """Every dotted prefix of ``keys`` (``engine``, ``engine.hyperprove``): a node a value may set whole."""
    return {k.name.rsplit(".", i)[0] for k in keys for i in range(1, k.name.count(".") + 1)}


def check_overrides(command: str, overrides: list) -> None:
    """Every ``key=value`` of a composed command names a key the command takes: a field of its
    schema (engine.* those of the method picked), a group preset, ``retriever`` or ``hydra.*``.

    Raises:
        UserError: a key the command refuses (saying why), or an unknown key (naming the closest).
    """
    from hpengine.errors import UserError

    groups = command_groups(command)
    picked = method_of(command, overrides).split(",") if "engine" in groups else [None]  # a,b: a -m sweep
    methods = method_configs()
    for method in picked:
        if method is not None and method not in methods:
            raise UserError(f"retriever= must be one of {', '.join(sorted(methods))}{closest(method, methods)} "
                            f"(got {method!r})")
    method = picked[0] if len(picked) == 1 else HOP_METHODS[0] if set(picked) & set(HOP_METHODS) else picked[0]
    keys = [k for m in picked for k in command_keys(command, m)]
    valid = {k.name for k in keys} | set(groups) | ({"retriever"} if "engine" in groups else set())
    if COMMANDS[command].positional and refusal(command, COMMANDS[command].positional) is None:
        valid.add(COMMANDS[command].positional)
    nodes = _nodes(keys)
    named = [a for a in overrides if re.match(r"(?:\+\+|\+)?encoder(?:=|\.name_or_path=.)", a)]
    follows_index = groups.get("encoder", ("",))[0] == "index" and not [a for a in named if a != "encoder=index"]
    given = {}
    for arg in overrides:
        m = OVERRIDE.match(arg)
        if m is None or not (m.group("eq") or arg.startswith("~")):
            continue  # a Hydra flag or its value (--cfg job), or what Hydra will say is wrong
        key = m.group("key").replace("/", ".")
        if m.group("eq"):  # a value (~key deletes one; +key=, ++key= set one as key= does)
            typed = arg.partition("=")[0].lstrip("+")
            same = "engine" if typed == "retriever" else typed  # retriever=NAME is engine=NAME
            if same in given:  # Hydra would keep the last silently
                raise UserError(f"{typed}= is given twice ({given[same]!r} and {arg!r}); give it once")
            given[same] = arg
        if key == "hydra" or key.startswith("hydra."):
            continue
        field = key.split(".", 1)[1] if key.startswith("encoder.") else ""
        if follows_index and field in INDEX_ENCODER_FIELDS:
            raise UserError(f"{command} uses the index's own encoder (encoder=index), whose {field} is the index's: "
                            f"{key}= would be ignored; name the index's encoder (encoder=minilm, encoder=e5-small or "
                            f"encoder.name_or_path=PATH) to set it (got {arg!r})")
        why_off = _switched_off(command, key, overrides)
        if why_off:
            raise UserError(f"{key}= is read only with {why_off}, which this command line does not turn on: it "
                            f"would be ignored (got {arg!r})")
        if method is not None and _unused_hop_key(key, method):
            raise UserError(f"{key}= is a setting of HyperProve's hop, which retriever={method} does not run: it "
                            f"would be ignored (got {arg!r})")
        if key in valid or key in nodes:
            continue
        why = refusal(command, key)
        if why is not None:
            raise UserError(f"{command} does not take {key}=: {why} (got {arg!r})")
        owners = _methods_with(command, key, set(methods) - set(picked)) if method is not None else []
        if owners:
            raise UserError(f"{key}= is a setting of {' and '.join(f'retriever={o}' for o in owners)}, not of "
                            f"retriever={method}, which would ignore it; add retriever={owners[0]} (got {arg!r})")
        raise UserError(f"unknown key {key!r} for hpengine {command}{closest(key, valid)}; hpengine {command} "
                        f"--help lists its keys (got {arg!r})")


def _methods_with(command: str, key: str, methods) -> list:
    """The methods among ``methods`` that take ``key`` on ``command``: an engine key given without
    the ``retriever=`` it belongs to (``engine.ranker`` without ``retriever=learned``)."""
    return sorted(m for m in methods if key in {k.name for k in command_keys(command, m)})


def escape_interpolation(arg: str) -> str:
    """``key=value`` with every ``${`` of the value escaped, so that OmegaConf takes it as text:
    no value given on the command line is interpolated (``titles=[${oc.env:HOME}]`` names the
    title ``${oc.env:HOME}``). A ``${`` the user escaped already stays as it is."""
    key, eq, value = arg.partition("=")
    if not eq or "${" not in value:
        return arg
    return key + eq + re.sub(r"(?<!\\)\$\{", r"\\${", value)


def split_positional(command: str, args: list) -> tuple:
    """``(positional arguments, the rest)`` of a command line: an argument is positional when it is
    neither ``KEY=VALUE`` nor a Hydra flag (nor a flag's value, ``--cfg job``)."""
    positional, rest, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1:
            rest.append(a)
            takes = a in HYDRA_VALUE_FLAGS or (a in ("--info", "-i") and i + 1 < len(args)
                                               and args[i + 1] in _INFO_TOPICS)
            if takes and i + 1 < len(args) and "=" not in args[i + 1]:
                rest.append(args[i + 1])
                i += 1
        elif OVERRIDE.match(a) and (OVERRIDE.match(a).group("eq") or a.startswith("~")):
            rest.append(a)
        else:
            positional.append(a)
        i += 1
    return positional, rest


# -------------------------------------------------------------------- help
def _wrap(text: str, indent: int, first: int | None = None) -> list:
    first = indent if first is None else first
    return textwrap.wrap(text, WIDTH, initial_indent=" " * first, subsequent_indent=" " * indent,
                         break_on_hyphens=False) or [""]


def _key_line(left: str, doc: str, column: int = 36) -> list:
    """``  left   doc`` with the doc wrapped at ``column`` (on the next line when ``left`` is long)."""
    left = "  " + left
    if len(left) + 2 > column:
        return [left, *_wrap(doc, column)] if doc else [left]
    lines = _wrap(doc, column)
    return [left.ljust(column) + lines[0].lstrip(), *lines[1:]]


def shown_default(command: str, key: Key) -> str:
    """A key's default as help shows it: ``(the index's)`` for a field of the index's own encoder."""
    if (key.name.startswith("encoder.") and key.name.split(".", 1)[1] in INDEX_ENCODER_FIELDS
            and command_groups(command).get("encoder", ("",))[0] == "index"):
        return "(the index's)"
    return _shown(key.default)


def _shown(value) -> str:
    """A default as ``--help`` shows it: an interpolation of the YAML (``${device}``) as written."""
    return value if isinstance(value, str) and value.startswith("${") else format_value(value)


def command_help(command: str, method: str | None = None) -> str:
    """``hpengine COMMAND --help``: usage, what it does, and every key with its one-line doc and
    default (engine.* keys: ``method``'s, default the command's default method)."""
    spec = COMMANDS[command]
    lines = [f"usage: {spec.usage}", "", *_wrap(spec.notes, 0)]
    keys = command_keys(command, method)
    if spec.positional:
        default = next((k.default for k in keys if k.name == spec.positional), "")
        also = [f"or {spec.positional}=IDX"] if refusal(command, spec.positional) is None else []
        also += [f"default {default}"] if default else []
        lines += ["", "IDX: the index folder" + (f" ({'; '.join(also)})" if also else "") + "."]
        keys = [k for k in keys if k.name != spec.positional]
    groups = command_groups(command)
    if groups:
        lines += ["", "presets (KEY=PRESET):"]
        for group, (default, options) in groups.items():
            name = "retriever" if group == "engine" else group
            also = " (or engine=METHOD)" if group == "engine" else ""
            lines += _key_line(f"{name}={default}", f"{GROUPS[group]}: {' | '.join(options)}{also}.")
    lines += ["", "keys (KEY=DEFAULT):"]
    for key in keys:
        lines += _key_line(f"{key.name}={shown_default(command, key)}", doc_summary(key.doc))
    if "engine" in groups:
        lines += ["", f"engine.* are {method or groups['engine'][0]}'s settings; "
                      f"hpengine {command} --help retriever=METHOD lists another method's."]
    lines += ["", "options:"]
    for name in spec.options:
        default, doc = OPTIONS[name]
        lines += _key_line(f"{name}={format_value(default)}", doc)
    if spec.conf:
        lines += ["", "Hydra flags: --cfg job prints the composed configuration; -m runs a sweep (key=a,b)."]
    return "\n".join(lines)


def usage() -> str:
    """The ``hpengine --help`` text: every command and every registered retrieval method."""
    lines = ["usage: hpengine <command> [argument ...]", "", "commands:"]
    for name, spec in COMMANDS.items():
        lines.append(f"  {name:<11} {spec.what + ':':<18} {spec.usage}")
    lines += ["", "hpengine COMMAND --help lists a command's keys with their defaults.",
              "", "methods (retriever=METHOD for eval, ask and demo; engine.KEY=VALUE sets the method's settings):"]
    lines += [f"  {name:<11} {_class_summary(cls)}" for name, cls in method_configs().items()]
    lines += ["", "Every command takes debug=true (or HPENGINE_DEBUG=1) to show the traceback of an error."]
    return "\n".join(lines)


def _class_summary(config_class: type) -> str:
    """``"What it is; config hpengine.config.ConfigClass"``: the first clause of the class's docstring."""
    where = f"{config_class.__module__.split('._')[0]}.{config_class.__name__}"
    doc = (config_class.__doc__ or "").strip()
    if not doc or doc.startswith(config_class.__name__ + "("):  # none: dataclass writes the signature
        return f"config {where}"
    return f"{doc.splitlines()[0].split(': ')[0].rstrip('.,;:')}; config {where}"


# --------------------------------------------------------------- reference
def _md(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _md_doc(doc: str) -> str:
    """A field's doc for a table cell: its summary sentence, then the rest as a sentence of its own."""
    head = doc_summary(doc)
    rest = doc[len(head):].lstrip(". ")
    return _md(f"{head}." + (f" {rest[0].upper()}{rest[1:]}" if rest else "")) if head else ""


def _md_value(value) -> str:
    return f"`{_shown(value)}`"


def reference_cli() -> str:
    """docs/reference/cli.md: every command, its shape and its keys with one-line docs and defaults."""
    out = ["# Command-line reference", "",
           "Generated from the config dataclasses by `python docs/reference/generate.py`; do not edit by hand.",
           "`hpengine COMMAND --help` prints the same. Every key is written `KEY=VALUE`; the index folder comes "
           "first where a command takes one.", ""]
    for name, spec in COMMANDS.items():
        out += [f"## hpengine {name}", "", "```", spec.usage, "```", "", spec.notes, ""]
        groups = command_groups(name)
        if groups:
            out += ["| preset | default | choices |", "|---|---|---|"]
            for group, (default, options) in groups.items():
                out.append(f"| `{'retriever' if group == 'engine' else group}` | `{default}` | "
                           f"{', '.join(f'`{o}`' for o in options)} |")
            out.append("")
        out += ["| key | default | description |", "|---|---|---|"]
        keys = [k for k in command_keys(name) if not k.name.startswith("engine.")]
        for key in keys:
            out.append(f"| `{key.name}` | `{shown_default(name, key)}` | {_md(doc_summary(key.doc))} |")
        for option in spec.options:
            default, doc = OPTIONS[option]
            out.append(f"| `{option}` | {_md_value(default)} | {_md(doc)} |")
        out.append("")
        if "engine" in groups:
            out += ["`engine.*`: the settings of the method picked, listed per method in "
                    "[config.md](config.md#retrieval-methods).", ""]
    return "\n".join(out)


def _config_table(cls: type, prefix: str, shared: set = frozenset()) -> list:
    """The fields of ``cls`` as a table (not those in ``shared``; a nested dataclass as one row)."""
    rows = ["| key | default | description |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name in shared:
            continue
        (key,) = [k for k in config_keys(cls, prefix) if k.name == prefix + f.name] or [None]
        if key is None:  # a nested dataclass: its own table says what it holds
            nested = type(getattr(cls(), f.name)).__name__
            rows.append(f"| `{prefix}{f.name}.*` | | {_md(field_doc(cls, f.name) or 'The settings of ' + nested)} "
                        f"({nested}) |")
            continue
        rows.append(f"| `{key.name}` | {_md_value(key.default)} | {_md_doc(key.doc)} |")
    return rows


def reference_config() -> str:
    """docs/reference/config.md: every configuration dataclass and its fields, full docs."""
    from hpengine.config import (EncoderConfig, EngineConfig, EvalConfig, ExtractorConfig, GraphConfig, ModelConfig,
                                 RetrievalConfig)

    def doc_of(cls):
        return " ".join((cls.__doc__ or "").split())

    out = ["# Configuration reference", "",
           "Generated from the config dataclasses in `hpengine/config/` by `python docs/reference/generate.py`; "
           "do not edit by hand. On the command line each field is `group.field=VALUE` (`encoder.dtype=float32`); "
           "in Python each class is a plain dataclass (`hpengine.config.EncoderConfig(dtype=\"float32\")`).", ""]
    for group, cls in (("extractor", ExtractorConfig), ("encoder", EncoderConfig), ("graph", GraphConfig),
                       ("grag", GragBuildConfig), ("retrieval", RetrievalConfig), ("model", ModelConfig),
                       ("eval", EvalConfig)):
        out += [f"## `{group}.*`: {cls.__name__}", "", _md(doc_of(cls)), "", *_config_table(cls, group + "."), ""]
    out += ["## Retrieval methods", "", "`retriever=METHOD` picks one; `engine.KEY=VALUE` sets its settings.", "",
            "### Shared by every method: EngineConfig", "", _md(doc_of(EngineConfig)), "",
            *_config_table(EngineConfig, "engine."), ""]
    shared = {f.name for f in dataclasses.fields(EngineConfig)}
    for name, cls in method_configs().items():
        out += [f"### `retriever={name}`: {cls.__name__}", "", _md(doc_of(cls)), ""]
        own = [f for f in dataclasses.fields(cls) if f.name not in shared]
        out += [*_config_table(cls, "engine.", shared), ""] if own else ["No settings of its own.", ""]
    return "\n".join(out)


def reference_pages() -> dict:
    """``{file name: text}`` of docs/reference/."""
    return {"cli.md": reference_cli() + "\n", "config.md": reference_config() + "\n"}
