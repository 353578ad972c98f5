"""Shared fixture: the built-in corpus indexed with the real fast extractor and a hashing encoder."""
import pytest

from hpengine.config import ExtractorConfig, GraphConfig
from hpengine.eval import load_questions
from hpengine.graph import build_index, builtin_corpus_path, builtin_questions_path, load_corpus
from hpengine.models import FastExtractor
from hpengine.testing._fakes import HashingEncoder


@pytest.fixture(scope="session")
def builtin_index():
    """``(index, encoder, questions)``: the built-in corpus (40 passages) and its 12 questions."""
    passages = load_corpus(str(builtin_corpus_path())).passages
    encoder = HashingEncoder(dim=256)
    index, _ = build_index(passages, extractor=FastExtractor(ExtractorConfig()), encoder=encoder,
                           graph_cfg=GraphConfig(synonym_threshold=0.9))
    return index, encoder, load_questions(str(builtin_questions_path()))
