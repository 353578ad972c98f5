"""Every setting is checked before any work: floats are finite and in their meaningful range,
int sizes have a documented maximum, and the sizes that depend on the index are checked (or
clamped, where a larger value means "all of them") when the engine is built."""
import dataclasses
import math
import re

import pytest

from hpengine.config import (EvalConfig, GragConfig, HyperProveConfig, PPRConfig, RetrievalConfig,
                             register_configs)
from hpengine.errors import UserError

#: int fields that are not sizes: seeds, thresholds and a slice (a larger value is a legal setting)
NOT_SIZES = {"sample_seed", "louvain_seed", "min_fact_chars", "min_community", "max_questions"}


def _method_configs() -> dict:
    from hpengine.pipeline import available_retrievers

    return {name: cls.config_class for name, cls in available_retrievers().items()
            if cls.config_class.__module__.startswith("hpengine.")}


def _registered_classes() -> list:
    """Every config class the entry points register (ConfigStore), and the dataclasses nested in them."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    register_configs(_method_configs())
    found = []

    def walk(repo):
        for node in repo.values():
            if isinstance(node, dict):
                walk(node)
                continue
            cls = OmegaConf.get_type(node.node)
            if dataclasses.is_dataclass(cls) and cls.__module__.startswith("hpengine.") and cls not in found:
                found.append(cls)

    walk(ConfigStore.instance().repo)
    for cls in found:  # grows while walked: nested dataclasses join the list
        for value in vars(cls()).values():
            if dataclasses.is_dataclass(value) and type(value) not in found:
                found.append(type(value))
    return found


CLASSES = _registered_classes()


def _fields(kind: str) -> list:
    return [(cls, f.name) for cls in CLASSES for f in dataclasses.fields(cls)
            if (kind == "float" and "float" in str(f.type))
            or (kind == "int" and str(f.type) in ("int", "<class 'int'>") and f.name not in NOT_SIZES)]


def _id(param) -> str:
    return f"{param[0].__name__}.{param[1]}" if isinstance(param, tuple) else repr(param)


def test_the_walk_finds_the_known_settings():
    names = {f"{c.__name__}.{n}" for c, n in _fields("float")}
    assert {"RetrievalConfig.alpha", "RetrievalConfig.restart", "PPRConfig.damping", "GragConfig.path_temperature",
            "GraphConfig.synonym_threshold", "GragBuildConfig.louvain_resolution"} <= names
    assert len(names) >= 25
    sizes = {f"{c.__name__}.{n}" for c, n in _fields("int")}
    assert {"HyperProveConfig.num_hops", "RetrievalConfig.top_k", "GragConfig.hops", "EvalConfig.batch_size"} <= sizes


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
@pytest.mark.parametrize("field", _fields("float"), ids=_id)
def test_every_float_setting_refuses_nan_and_inf(field, value):
    cls, name = field
    with pytest.raises(ValueError, match=rf"\b{name}\b.*\(got {re.escape(repr(value))}\)") as err:
        cls(**{name: value})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("field", _fields("int"), ids=_id)
def test_every_int_size_has_a_maximum(field):
    cls, name = field
    with pytest.raises(ValueError, match=rf"\b{name} must be <= \d+ .*\(got 1000000000000\)"):
        cls(**{name: 10**12})


@pytest.mark.parametrize("cls, kwargs, pattern", [
    (PPRConfig, dict(damping=0.0), r"engine.damping must be > 0"),
    (PPRConfig, dict(damping=-0.1), r"engine.damping must be > 0"),
    (PPRConfig, dict(damping=1.0), r"engine.damping must be < 1"),
    (PPRConfig, dict(tol=1.0), r"engine.tol must be < 1"),
    (HyperProveConfig, dict(num_hops=1_000_000), r"engine.num_hops must be <= 16 .*\(got 1000000\)"),
    (GragConfig, dict(hops=1_000_000), r"engine.hops must be <= 16"),
    (GragConfig, dict(path_temperature=-0.5), r"engine.path_temperature must be >= 0"),
    (RetrievalConfig, dict(top_k=100_000_000), r"retrieval.top_k must be <= 4096"),
    (RetrievalConfig, dict(subgraph_size=100_000), r"retrieval.subgraph_size must be <= 4096"),
    (EvalConfig, dict(recall_ks=[2, 5000]), r"eval.recall_ks"),
])
def test_settings_that_cannot_rank_are_refused(cls, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        cls(**kwargs)


def test_the_defaults_and_the_edges_of_the_ranges_are_accepted():
    for cls in CLASSES:
        cls()
    PPRConfig(damping=1e-3)
    PPRConfig(damping=0.999)
    RetrievalConfig(alpha=0.0, restart=1.0, theta=0.0, top_k=4096, subgraph_size=4096, num_seeds=4096)
    HyperProveConfig(num_hops=16)
    GragConfig(path_temperature=0.0, hops=0)


@pytest.mark.parametrize("overrides, pattern", [
    (["retrieval.alpha=nan"], r"retrieval.alpha must be a finite number \(got nan\)"),
    (["retrieval.restart=nan"], r"retrieval.restart must be a finite number \(got nan\)"),
    (["retrieval.frontier_weight=inf"], r"retrieval.frontier_weight must be a finite number \(got inf\)"),
    (["engine=ppr", "engine.damping=0"], r"engine.damping must be > 0"),
    (["engine.num_hops=1000000"], r"engine.num_hops must be <= 16"),
    (["retrieval.top_k=100000000"], r"retrieval.top_k must be <= 4096"),
])
def test_the_command_line_refuses_them_in_one_line(overrides, pattern):
    """What ``hpengine eval ...`` runs before anything loads (in-process: compose, then check)."""
    from hpengine.cli import _compose, job_config

    register_configs(_method_configs())
    cfg = _compose("eval", ["index=idx", "questions=q.json", *overrides])
    with pytest.raises(UserError, match=pattern) as err:
        job_config(cfg)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ sizes checked against the index
TABLE = {  # title -> facts (text, entities): 6 passages, 12 facts
    f"P{i}": [(f"P{i} fact one about E{i} and E{i + 1}.", [f"E{i}", f"E{i + 1}"]),
              (f"P{i} fact two about E{i + 1} and E{i + 2}.", [f"E{i + 1}", f"E{i + 2}"])]
    for i in range(6)
}


@pytest.fixture(scope="module")
def tiny():
    from hpengine.graph import build_index
    from hpengine.graph._corpus import Passage
    from hpengine.testing._fakes import HashingEncoder, ListExtractor

    encoder = HashingEncoder(dim=64)
    passages = [Passage(t, " ".join(text for text, _ in facts)) for t, facts in TABLE.items()]
    index, _ = build_index(passages, extractor=ListExtractor(TABLE), encoder=encoder)
    assert index.num_facts == 12
    return index, encoder


QUESTIONS = ["What links E1 and E3?", "Who is E4?", "Where is E6?"]


def _answers(engine) -> list:
    return [(p.answer, p.passages, [[(f.text, f.score) for f in h.facts] for h in p.chain])
            for p in engine.answer(QUESTIONS)]


def test_fact_counts_beyond_the_index_are_clamped_without_changing_results(tiny):
    from hpengine.pipeline import Engine

    index, encoder = tiny
    asked = RetrievalConfig(num_seeds=100, subgraph_size=200, top_k=50)
    engine = Engine(index, encoder, asked, HyperProveConfig(num_hops=3))
    assert (engine.retrieval.num_seeds, engine.retrieval.subgraph_size, engine.retrieval.top_k) == (12, 12, 12)
    assert asked.top_k == 50  # the caller's config is not changed
    exact = Engine(index, encoder, RetrievalConfig(num_seeds=12, subgraph_size=12, top_k=12),
                   HyperProveConfig(num_hops=3))
    assert _answers(engine) == _answers(exact)


def test_hops_whose_frontier_cannot_fit_the_subgraph_are_refused_when_the_engine_is_built(tiny):
    """Each hop carries its K facts into the next: hop t forces t * K frontier facts and S seeds
    into a subgraph of M (< H) facts; the last hop that cannot is refused before any question."""
    from hpengine.pipeline import Engine

    index, encoder = tiny
    retrieval = RetrievalConfig(num_seeds=2, subgraph_size=6, top_k=2)
    with pytest.raises(UserError, match=r"engine.num_hops=4 .* retrieval.top_k=2 .* retrieval.num_seeds=2 .*"
                                        r"retrieval.subgraph_size=6 .*\(got 3 \* 2 \+ 2 = 8 > 6\)") as err:
        Engine(index, encoder, retrieval, HyperProveConfig(num_hops=4))
    assert "\n" not in str(err.value)
    fits = Engine(index, encoder, retrieval, HyperProveConfig(num_hops=3))  # 2 * 2 + 2 = 6 facts fit
    assert len(fits.answer(QUESTIONS)) == 3
    # the whole index fits the subgraph: nothing is ever cut, any number of hops answers
    whole = Engine(index, encoder, RetrievalConfig(num_seeds=2, subgraph_size=12, top_k=5),
                   HyperProveConfig(num_hops=5))
    assert len(whole.answer(QUESTIONS)) == 3
