"""The QA engine: questions in, answers with evidence chains and ranked passages out.

The engine holds one index, one encoder and (optionally) one LLM decomposer and reader, and
owns the flow of a batch: it encodes the questions once, hands them to the configured retrieval
method (a registered :class:`~hpengine.pipeline.Retriever`) for the method's own work, and
finishes every method alike (:func:`finish`): the answer where the method gives none (LLM: a read
of the top passages; no LLM: the evidence's best bridge entity), the chain record, padding and
predictions. Every method uses the same shared steps (:class:`~hpengine.pipeline.QASteps`), so
methods compare like for like.
"""
from __future__ import annotations

from dataclasses import fields, replace

from hpengine._profiling import StageTimer
from hpengine.config import EngineConfig, RetrievalConfig
from hpengine.pipeline._answer import answers_from_predictions
from hpengine.pipeline._steps import QASteps
from hpengine.pipeline._types import HopRecord, Prediction, Retrieved
from hpengine.pipeline.retrievers import Retriever, get_retriever

DEFAULT_RETRIEVER = "hyperprove"


def _resolve(retriever, config: EngineConfig | None) -> tuple[type, EngineConfig]:
    """The retriever class and its config from ``retriever`` (a name or class) and/or ``config``."""
    if retriever is None:
        name = config.method if config is not None and config.method else DEFAULT_RETRIEVER
        cls = get_retriever(name)
    elif isinstance(retriever, str):
        cls = get_retriever(retriever)
    elif isinstance(retriever, type) and issubclass(retriever, Retriever):
        cls = retriever
    else:
        raise TypeError(f"retriever must be a name or a Retriever subclass (got {retriever!r})")
    if config is None:
        config = cls.config_class()
    elif type(config) is EngineConfig:  # shared settings only: the method's own keep their defaults
        config = cls.config_class(**{f.name: getattr(config, f.name) for f in fields(EngineConfig)})
    if not isinstance(config, cls.config_class):
        raise TypeError(f"retriever {cls.name!r} needs a {cls.config_class.__name__} config "
                        f"(got {type(config).__name__})")
    return cls, config


def fit_to_index(retrieval: RetrievalConfig, index) -> RetrievalConfig:
    """``retrieval`` with its fact counts (``num_seeds``, ``subgraph_size``, ``top_k``) lowered to
    the index's facts ``H``: a hop asked for more seeds, subgraph facts or kept facts than the
    index has returns all of them and pads the rest with ``-1``, so the lowered config gives the
    same predictions with narrower blocks. The caller's config is not changed (a copy is)."""
    num_facts = index.num_facts
    over = {name: num_facts for name in ("num_seeds", "subgraph_size", "top_k") if getattr(retrieval, name) > num_facts}
    return replace(retrieval, **over) if over and num_facts > 0 else retrieval


class Engine:
    """Batched multi-hop QA over an :class:`~hpengine.graph.Index` with one retrieval method.

    Args:
        index: the index (its tensors' device is where retrieval runs).
        encoder: query encoder; must be the one the index was built with. Default None: the
            index's, rebuilt from its recorded config (``index.meta["encoder_config"]``), on the
            index's device (as ``device=`` on the command line).
        retrieval: HyperProve hop parameters (``RetrievalConfig()`` by default); fact counts above
            the index's facts are lowered to them (:func:`fit_to_index`, same predictions).
        config: the method's config (a :class:`~hpengine.config.EngineConfig` subclass such as
            ``HyperProveConfig``, ``DenseConfig``, ``PPRConfig``); its class picks the method. A
            plain ``EngineConfig`` sets the shared fields of the method ``retriever`` names
            (HyperProve by default).
        retriever: the method by name (``"hyperprove"``, ``"dense"``, ``"ppr"``, or a registered
            one) or class; with ``config`` None, that method's default config.
        decomposer, reader: LLM components; both None selects the no-LLM mode.

    Raises:
        UserError: a setting the index cannot serve (checked here, before any question: e.g.
            HyperProve hops whose carried facts cannot fit ``retrieval.subgraph_size``).

    Example: :meth:`ask`.
    """

    def __init__(self, index, encoder=None, retrieval: RetrievalConfig | None = None,
                 config: EngineConfig | None = None, *, retriever=None, decomposer=None, reader=None):
        if encoder is None:
            from hpengine.config import EncoderConfig
            from hpengine.models import encoder_for_index

            encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path="", device=str(index.device)))
        if index.meta.get("encoder") not in (None, encoder.name):
            raise ValueError(f"index was built with encoder {index.meta.get('encoder')!r} but the engine got "
                             f"{encoder.name!r}; use the same encoder")
        cls, config = _resolve(retriever, config)
        self.timer = StageTimer(index.device)
        retrieval = fit_to_index(retrieval or RetrievalConfig(), index)
        self.steps = QASteps(index, encoder, config, retrieval, decomposer, reader, self.timer)
        self.retriever = cls(self.steps)
        self.stats = {"questions": 0}

    @property
    def method(self) -> str:
        """Name of the retrieval method."""
        return self.retriever.name

    @property
    def index(self):
        return self.steps.index

    @property
    def encoder(self):
        return self.steps.encoder

    @property
    def config(self) -> EngineConfig:
        return self.steps.config

    @property
    def retrieval(self) -> RetrievalConfig:
        return self.steps.retrieval

    @property
    def decomposer(self):
        return self.steps.decomposer

    @property
    def reader(self):
        return self.steps.reader

    def llm_components(self) -> list:
        """Every model the engine calls (decomposer, reader, the method's own), each once: their
        ``stats`` (``tokens_in`` / ``tokens_out``) are what reports count."""
        models = (self.decomposer, self.reader, *self.retriever.llm_components())
        return list({id(m): m for m in models if m is not None}.values())

    def answer(self, questions: list) -> list:
        """Answer a batch of questions (the batch path: passages as ids).

        Returns:
            one :class:`~hpengine.pipeline.Prediction` per question; :meth:`ask` resolves its
            passages to titles, texts and scores.
        """
        return self._predict(questions)[0]

    def ask(self, questions):
        """Answer one question or a list of them, with passages a reader can print.

        Args:
            questions: a question (str) or a list of questions, answered as one batch.

        Returns:
            an :class:`~hpengine.pipeline.Answer` (a list of them, in order, for a list): the
            answer, the ranked passages with title, text and score, and the evidence chain.

        Example:
            >>> import tempfile, hpengine
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     index = hpengine.build_index(hpengine.demo_corpus()[:4], f"{tmp}/index")
            ...     answers = hpengine.Engine(index, retriever="dense").ask(["Who directed The Salt Lanterns?"])
            >>> top = answers[0].passages[0]
            >>> top.title, top.score > 0.5
            ('The Salt Lanterns', True)
        """
        single = isinstance(questions, str)
        batch = [questions] if single else list(questions)
        preds, question_emb = self._predict(batch)
        answers = answers_from_predictions(preds, self.index, question_emb, is_llm_answer=self.reader is not None)
        return answers[0] if single else answers

    def _predict(self, questions: list) -> tuple:
        """``(predictions, question embeddings [Q, D])`` of a batch (``([], None)`` for none)."""
        if not questions:
            return [], None
        questions = list(questions)
        self.stats["questions"] += len(questions)
        question_emb = self.steps.encode(questions)
        preds = finish(self.steps, questions, question_emb, self.retriever.retrieve(questions, question_emb))
        return preds, question_emb


def finish(steps: QASteps, questions: list, question_emb, out: Retrieved) -> list:
    """The predictions of a batch from a method's :class:`~hpengine.pipeline.Retrieved`: what every
    method shares after its own retrieval, written once.

    Shapes:
        question_emb ``[Q, D]``; ``out.ranked`` ``[Q, W]``.
    """
    cfg, q = steps.config, len(questions)
    answers = out.answers
    if answers is None:
        if steps.use_llm:
            answers = steps.read_passages(questions, out.ranked[:, : cfg.reader_passages])
        else:
            fact_ids, scores = out.evidence or steps.passage_facts(out.ranked[:, : cfg.reader_passages])
            answers = steps.answer_from_facts(questions, question_emb, fact_ids, scores)
    if out.chains is not None:
        chains = out.chains
    elif out.hop_facts is not None:
        linked = out.hop_linked or [[] for _ in range(q)]
        chains = [[HopRecord(qu, a, f, list(ln))] for qu, a, f, ln in zip(questions, answers, out.hop_facts, linked)]
    else:
        chains = [[] for _ in range(q)]
    empty = [[] for _ in range(q)]
    return [Prediction(qu, a, ch, [p for p in row if p >= 0], list(dg), list(nt), list(pt))
            for qu, a, ch, row, dg, nt, pt in zip(questions, answers, chains, out.ranked.tolist(),
                                                   out.diagnostics or empty, out.notes or empty, out.paths or empty)]
