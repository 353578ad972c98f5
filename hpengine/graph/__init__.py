"""Atomic facts -> hypergraph: construction, corpus I/O, index save/load/add."""
from hpengine.graph._hypergraph import HyperGraph

__all__ = ["HyperGraph"]

from hpengine.graph._corpus import (CorpusLoad, Passage, builtin_corpus_path, builtin_questions_path, load_corpus,
                                    load_records)

__all__ += ["CorpusLoad", "Passage", "load_corpus", "load_records", "builtin_corpus_path", "builtin_questions_path"]

from hpengine.graph._texts import PassageColumn, TextColumn
from hpengine.graph._mmap import map_safetensors, mapped_empty, page_out, read_safetensors, write_safetensors
from hpengine.graph._shards import gather_rows
from hpengine.graph._files import write_atomic

__all__ += ["PassageColumn", "TextColumn", "gather_rows", "write_atomic", "map_safetensors", "mapped_empty", "page_out",
            "read_safetensors", "write_safetensors"]

from hpengine.graph._synonyms import expand_with_synonyms, symmetrize_pairs, synonym_pairs

__all__ += ["expand_with_synonyms", "symmetrize_pairs", "synonym_pairs"]

from hpengine.graph._builder import add_passages, build_index, build_index_sharded, entity_synonyms, synonym_eligible
from hpengine.graph._index import Index
from hpengine.graph._store import (DEFAULT_LOCK_TIMEOUT, FORMAT_VERSION, IndexFormatError, IndexLockedError,
                                   IndexStore, StoreWriter, read_generation)

__all__ += ["DEFAULT_LOCK_TIMEOUT", "FORMAT_VERSION", "Index", "IndexFormatError", "IndexLockedError", "IndexStore",
            "StoreWriter", "add_passages", "build_index", "build_index_sharded", "entity_synonyms", "read_generation",
            "synonym_eligible"]

from hpengine.graph._lexical import PassageWords, build_passage_words, words_of
from hpengine.graph._lookups import IndexLookups

__all__ += ["IndexLookups", "PassageWords", "build_passage_words", "words_of"]

from hpengine.graph._grag import (GRAG_FORMAT_VERSION, GragParts, build_grag_parts, extractive_summaries, has_grag_files,
                                  louvain_communities)

__all__ += ["GRAG_FORMAT_VERSION", "GragParts", "build_grag_parts", "extractive_summaries", "has_grag_files",
            "louvain_communities"]

from hpengine.graph._edit import delete_passages, find_passages, update_passages

__all__ += ["delete_passages", "find_passages", "update_passages"]
