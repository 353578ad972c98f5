"""Encoders by name: prompt kinds at every call site, thresholds on the encoder's scale, the
index's encoder by default and the refusal of another one."""
import pytest
import torch

from hpengine.config import EncoderConfig, EvalJobConfig, GraphConfig, PPRConfig
from hpengine.errors import UserError
from hpengine.graph import Passage, build_index
from hpengine.jobs import make_engine
from hpengine.models import Encoder, index_encoder_config
from hpengine.pipeline import Engine
from hpengine.testing._fakes import HashingEncoder, ListExtractor

TABLE = {"A": [("Ann Lee directed Flannelfoot.", ["Ann Lee", "Flannelfoot"])],
         "B": [("Ann Lee was born in Oslo.", ["Ann Lee", "Oslo"]), ("Anne Lee lives in Oslo.", ["Anne Lee", "Oslo"])],
         "C": [("Oslo is in Norway.", ["Oslo", "Norway"])]}
PASSAGES = [Passage(t, " ".join(f for f, _ in TABLE[t])) for t in TABLE]


class ScaledEncoder(HashingEncoder):
    """A hashing encoder that carries its own threshold scale, as an ``Encoder`` from a preset does."""

    def __init__(self, synonym_threshold=0.8, link_threshold=0.6):
        super().__init__(dim=64)
        self.synonym_threshold, self.link_threshold = synonym_threshold, link_threshold


def _build(encoder, graph_cfg=None):
    return build_index(PASSAGES, extractor=ListExtractor(TABLE), encoder=encoder, graph_cfg=graph_cfg)[0]


def test_index_embeds_everything_as_passages_and_records_encoder():
    enc = HashingEncoder(dim=64)
    index = _build(enc)
    assert enc.kinds == ["passage"] * 3  # facts, entity names, passages
    assert index.meta["encoder"] == enc.name
    assert index.meta["encoder_prompts"] == {"query": "", "passage": ""}
    assert index.meta["synonym_threshold"] == 0.8  # no scale on the encoder: MiniLM's default
    assert "encoder_config" not in index.meta  # a duck-typed encoder has no config to rebuild it from


def test_eta_defaults_to_the_encoders_and_an_explicit_one_wins():
    low = _build(ScaledEncoder(synonym_threshold=0.3))
    same = _build(HashingEncoder(dim=64), GraphConfig(synonym_threshold=0.3))
    assert low.meta["synonym_threshold"] == 0.3 and low.synonyms.shape[1] > 0
    assert torch.equal(low.synonyms, same.synonyms)
    explicit = _build(ScaledEncoder(synonym_threshold=0.3), GraphConfig(synonym_threshold=0.99))
    assert explicit.meta["synonym_threshold"] == 0.99 and explicit.synonyms.shape[1] == 0


@pytest.mark.parametrize("retriever", ["dense", "hyperprove", "ppr"])
def test_queries_are_encoded_as_queries(builtin_index, retriever):
    index, _, questions = builtin_index
    enc = HashingEncoder(dim=256)  # same name as the index's
    Engine(index, enc, retriever=retriever).answer([q.question for q in questions[:3]])
    assert enc.kinds and set(enc.kinds) == {"query"}  # questions, search texts, NER mentions


def test_link_threshold_defaults_to_the_encoders(builtin_index):
    index, _, _ = builtin_index
    enc = ScaledEncoder(link_threshold=0.33)
    enc.name = index.meta["encoder"]
    assert Engine(index, enc, retriever="ppr").retriever.link_threshold == 0.33
    assert Engine(index, enc, config=PPRConfig(link_threshold=0.7)).retriever.link_threshold == 0.7
    assert Engine(index, HashingEncoder(dim=256), retriever="ppr").retriever.link_threshold == 0.6


OLD_MINILM_META = {  # index.json of an index built before prompts (as /work/idx/*)
    "encoder": "minilm|pooling=mean|normalize=True",
    "build_config": {"encoder": {"name_or_path": "minilm", "dtype": "bfloat16", "batch_size": 128,
                                 "max_tokens_per_batch": 16384, "max_length": 256, "pooling": "mean",
                                 "normalize": True, "device": "cpu", "local_files_only": True}},
    "synonym_threshold": 0.8,
}


def test_encoder_config_from_old_index_meta():
    runtime = EncoderConfig(name_or_path="", dtype="float32", batch_size=7)
    cfg = index_encoder_config(OLD_MINILM_META, runtime)
    assert (cfg.name_or_path, cfg.max_length, cfg.query_prompt, cfg.passage_prompt) == ("minilm", 256, None, None)
    assert (cfg.dtype, cfg.batch_size) == ("float32", 7)  # run-time fields are this run's
    assert Encoder.name_of(cfg) == OLD_MINILM_META["encoder"]
    by_name = index_encoder_config({"encoder": "minilm|pooling=cls|normalize=False"})
    assert (by_name.name_or_path, by_name.pooling, by_name.normalize) == ("minilm", "cls", False)
    with pytest.raises(UserError, match="records no encoder config"):
        index_encoder_config({"encoder": "hashing-encoder-64"})


def test_e5_index_rebuilds_its_encoder_config_and_names_the_build_command(tmp_path, monkeypatch):
    meta = {"encoder": "e5-small|pooling=mean|normalize=True|query_prompt='query: '|passage_prompt='passage: '",
            "encoder_prompts": {"query": "query: ", "passage": "passage: "},
            "encoder_config": {"name_or_path": "e5-small", "max_length": 512, "pooling": "mean", "normalize": True,
                               "query_prompt": "query: ", "passage_prompt": "passage: ",
                               "synonym_threshold": 0.9, "link_threshold": 0.85, "dtype": "bfloat16"}}
    cfg = index_encoder_config(meta, EncoderConfig(name_or_path="", dtype="float32"))
    assert (cfg.max_length, cfg.query_prompt, cfg.synonym_threshold, cfg.link_threshold, cfg.dtype) == \
        (512, "query: ", 0.9, 0.85, "float32")
    monkeypatch.setenv("HPENGINE_MODELS", str(tmp_path))
    with pytest.raises(UserError, match="get_embedder.py multilingual-e5-small"):
        Encoder.name_of(cfg)


def test_another_encoder_than_the_index_is_refused_in_one_line(builtin_index, tmp_path, capsys):
    from hpengine.cli import main

    index, _, _ = builtin_index
    index.save(tmp_path / "idx")
    with pytest.raises(UserError) as err:
        make_engine(EvalJobConfig(index=str(tmp_path / "idx"), encoder=EncoderConfig(name_or_path="minilm")))
    message = str(err.value)
    assert "\n" not in message and "hashing-encoder-256" in message and "minilm|pooling=mean" in message
    with pytest.raises(SystemExit) as exc:
        main(["ask", str(tmp_path / "idx"), "Who directed Jaws?", "encoder=minilm"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpengine: error:") and "was built with encoder" in lines[0]
    with pytest.raises(UserError, match="records no encoder config"):  # a custom encoder: name it
        make_engine(EvalJobConfig(index=str(tmp_path / "idx")))
