"""Hugging Face / spaCy model wrappers: extractors, generation, encoder; the factories that build them
from their config dataclasses."""
from hpengine.models._entities import (ExtractedFact, entity_key, merge_entities, name_keys_in, normalize_entity,
                                       title_name)
from hpengine.models._extract_fast import FastExtractor
from hpengine.models._generate import GenerateResult, batched_generate
from hpengine.models._sampling import SeededGumbelSampler
from hpengine.models._extract_llm import PROMPT_VERSION, LLMExtractor, ParsedExtraction, parse_extraction

__all__ = ["ExtractedFact", "normalize_entity", "entity_key", "merge_entities", "title_name", "name_keys_in",
           "FastExtractor",
           "GenerateResult", "batched_generate", "SeededGumbelSampler", "LLMExtractor", "ParsedExtraction",
           "parse_extraction", "PROMPT_VERSION"]

from hpengine.models._encoder import Encoder, resolve_dtype, resolve_model_path

__all__ += ["Encoder", "resolve_dtype", "resolve_model_path"]

from hpengine.models._decomposer import Decomposer
from hpengine.models._reader import Reader

__all__ += ["Decomposer", "Reader"]

from hpengine.models._mentions import MentionTagger

__all__ += ["MentionTagger"]

from hpengine.models._triples import TRIPLE_PROMPT_VERSION, DependencyTripleExtractor, LLMTripleExtractor, parse_triples
from hpengine.models._grag_models import CrossEncoder, Summarizer, TreePlanner, load_summarizer

__all__ += ["TRIPLE_PROMPT_VERSION", "DependencyTripleExtractor", "LLMTripleExtractor", "parse_triples",
            "CrossEncoder", "Summarizer", "TreePlanner", "load_summarizer"]

from hpengine.models._decomposer import PROMPT_VERSION as _DECOMPOSE_VERSION
from hpengine.models._grag_models import PLANNER_PROMPT_VERSION as _PLAN_VERSION
from hpengine.models._reader import PROMPT_VERSION as _READ_VERSION

from hpengine.models._factory import (check_llm, encoder_for_index, index_encoder_config, load_llm, make_encoder,
                                      make_extractor)

__all__ += ["check_llm", "encoder_for_index", "index_encoder_config", "load_llm", "make_encoder", "make_extractor"]

#: versions of the question-time LLM prompts (what a resumed eval must match)
QA_PROMPT_VERSIONS = {"decompose": _DECOMPOSE_VERSION, "read": _READ_VERSION, "plan": _PLAN_VERSION}
__all__ += ["QA_PROMPT_VERSIONS"]
