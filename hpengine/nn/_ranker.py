"""A learned ranker over the engine's own signals (docs/methods/learned.md): each candidate passage
of a question is scored from a feature vector (its ranks in the members' lists, its cosine to the
question, whether the question names it, whether the fused first passage links to it, ...) by a
linear term plus a small MLP, optionally on top of one list's order (the prior), and trained
listwise on the gold passages.

The weights are saved as safetensors with the feature schema, the encoder and the settings they
need in its metadata (no pickle); :func:`load_ranker` refuses a file whose schema differs.
"""
from __future__ import annotations

import contextlib

import json
import os

import torch
from torch import Tensor

from hpengine.nn._adapter import QueryAdapter

RANKER_FORMAT = "hpengine-ranker"
RANKER_VERSION = 1


class CandidateRanker(torch.nn.Module):
    """Scores ``C`` candidates of each of ``Q`` questions from ``F`` features each.

    ``score = w·z + mlp(z)`` with ``z`` the features standardised by the training set's mean and
    spread (buffers saved with the weights); ``hidden=0`` is the linear model alone. With a
    ``prior`` feature (a reciprocal rank ``1 / (1 + rank)``, 0 where the passage is not listed), the
    score starts from that list's order: ``log(max(x_prior, prior_floor)) + w·z + mlp(z)``, so that
    weight decay pulls the model toward that list rather than toward no order at all
    (docs/methods/learned.md).

    Args:
        num_features: F.
        hidden: width of the MLP's hidden layer (default 16; 0: linear only).
        adapter_dim: D of a :class:`~hpengine.nn.QueryAdapter` the learned method applies to the
            question embeddings before its members run (0: none); :meth:`adapt` applies it.
        prior: column of the reciprocal-rank feature the score starts from (-1: none).
        prior_floor: the reciprocal rank an unlisted passage counts as (its log is the prior's
            lowest score).

    Shapes:
        forward: features float ``[Q, C, F]``, valid bool ``[Q, C]`` -> scores float32 ``[Q, C]``
        (``-inf`` where not valid).

    Example:
        >>> r = CandidateRanker(3, hidden=0)
        >>> r(torch.zeros(2, 4, 3), torch.tensor([[True] * 4, [True, True, False, False]])).shape
        torch.Size([2, 4])
    """

    def __init__(self, num_features: int, hidden: int = 16, adapter_dim: int = 0, prior: int = -1,
                 prior_floor: float = 0.02):
        super().__init__()
        if num_features < 1 or hidden < 0 or adapter_dim < 0:
            raise ValueError(f"CandidateRanker needs num_features >= 1, hidden >= 0 and adapter_dim >= 0 (got "
                             f"{num_features}, {hidden}, {adapter_dim})")
        if not -1 <= prior < num_features or not 1e-6 <= prior_floor <= 1.0:  # below 1e-6 float32 logs reach -inf
            raise ValueError(f"CandidateRanker needs -1 <= prior < num_features and 1e-6 <= prior_floor <= 1 (got "
                             f"{prior}, {prior_floor})")
        self.num_features, self.hidden = num_features, hidden
        self.prior, self.prior_floor = prior, prior_floor
        self.query_adapter = QueryAdapter(adapter_dim) if adapter_dim else None
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("scale", torch.ones(num_features))
        self.linear = torch.nn.Linear(num_features, 1)
        self.mlp = (torch.nn.Sequential(torch.nn.Linear(num_features, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1)) if hidden else None)

    @property
    def adapter_dim(self) -> int:
        return self.query_adapter.dim if self.query_adapter is not None else 0

    def adapt(self, query: Tensor) -> Tensor:
        """The question embeddings ``[Q, D]`` the members should use: through the query adapter
        when the ranker has one, else unchanged."""
        return query if self.query_adapter is None else self.query_adapter(query)

    def fit_scaling(self, features: Tensor, valid: Tensor) -> None:
        """Set the standardisation from the valid candidates of ``features`` ``[N, C, F]``."""
        rows = features[valid].float()
        self.mean.copy_(rows.mean(0) if len(rows) else torch.zeros_like(self.mean))
        self.scale.copy_(rows.std(0).clamp_min(1e-6) if len(rows) > 1 else torch.ones_like(self.scale))

    def forward(self, features: Tensor, valid: Tensor) -> Tensor:
        if features.dim() != 3 or features.shape[-1] != self.num_features:
            raise ValueError(f"features must be [Q, C, {self.num_features}] (got {tuple(features.shape)})")
        z = (features.float() - self.mean) / self.scale
        score = self.linear(z).squeeze(-1)
        if self.mlp is not None:
            score = score + self.mlp(z).squeeze(-1)
        if self.prior >= 0:
            score = score + torch.log(features[..., self.prior].float().clamp_min(self.prior_floor))
        return score.masked_fill(~valid, float("-inf"))

    def start_at_prior(self) -> None:
        """Zero the output layers, so that an untrained ranker orders as its prior does (or gives
        every candidate one score without a prior)."""
        outputs = [self.linear] + ([self.mlp[2]] if self.mlp is not None else [])
        with torch.no_grad():
            for layer in outputs:
                layer.weight.zero_()
                layer.bias.zero_()


def listwise_loss(scores: Tensor, gold: Tensor, valid: Tensor, weight: Tensor | None = None) -> Tensor:
    """Cross-entropy of the softmax over a question's candidates against the uniform distribution
    on its gold candidates (every gold passage pulled up, not only the easiest one), averaged over
    the questions with a gold candidate (the others add nothing); ``weight``: each question's weight
    in that average (None: the same for all).

    Shapes:
        scores float ``[Q, C]`` (``-inf`` where not valid), gold and valid bool ``[Q, C]``, weight
        float ``[Q]`` -> scalar.

    Example:
        >>> s = torch.tensor([[2.0, 0.0, float("-inf")]])
        >>> round(float(listwise_loss(s, torch.tensor([[True, False, False]]), torch.tensor([[True, True, False]]))), 4)
        0.1269
    """
    if weight is not None and tuple(weight.shape) != (scores.shape[0],):
        raise ValueError(f"listwise_loss needs one weight per question, [{scores.shape[0]}] (got "
                         f"{list(weight.shape)})")
    gold = gold & valid
    count = gold.sum(1)
    has = count > 0
    if not bool(has.any()):
        return scores.sum() * 0.0
    log_p = scores - torch.logsumexp(scores, dim=1, keepdim=True)
    on_gold = torch.where(gold, log_p, torch.zeros_like(log_p)).sum(1)
    per_question = -on_gold[has] / count[has]
    if weight is None:
        return per_question.mean()
    weight = weight.to(per_question)[has]
    return (per_question * weight).sum() / weight.sum()


def fit_ranker(features: Tensor, gold: Tensor, valid: Tensor, *, hidden: int = 16, epochs: int = 300,
               lr: float = 0.01, weight_decay: float = 1e-4, seed: int = 0, prior: int = -1,
               weight: Tensor | None = None, log=None) -> CandidateRanker:
    """A :class:`CandidateRanker` trained full-batch with Adam on the listwise loss, on one CPU
    thread (torch's thread count is restored after): the same weights whatever that count.

    Args:
        features: float ``[N, C, F]``; gold, valid: bool ``[N, C]``.
        prior: the ranker's ``prior`` feature (-1: none); with one, training starts from its order
            (:meth:`CandidateRanker.start_at_prior`). The engine's recipe
            (:func:`hpengine.pipeline.train_ranker`, ``hpengine train``) pairs the fusion's order as
            the prior with ``weight_decay=0.03``; this generic default (1e-4, no prior) is the plain
            model's.
        weight: float ``[N]``, each question's weight in the loss (:func:`listwise_loss`, which
            refuses any other shape; None: the same for all).
        log: ``(epoch, loss) -> None`` called every 50 epochs and at the end (progress).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(64, 6, 2, generator=g); gold = x[..., 0] == x[..., 0].amax(1, keepdim=True)
        >>> r = fit_ranker(x, gold, torch.ones(64, 6, dtype=torch.bool), hidden=0, epochs=100)
        >>> bool((r(x, torch.ones(64, 6, dtype=torch.bool)).argmax(1) == x[..., 0].argmax(1)).float().mean() > 0.9)
        True
    """
    torch.manual_seed(seed)
    model = CandidateRanker(features.shape[-1], hidden, prior=prior)
    model.fit_scaling(features, valid)
    if prior >= 0:
        model.start_at_prior()
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    with _one_thread():
        for epoch in range(epochs):
            opt.zero_grad()
            loss = listwise_loss(model(features, valid), gold, valid, weight)
            loss.backward()
            opt.step()
            if log is not None and (epoch % 50 == 0 or epoch == epochs - 1):
                log(epoch, float(loss.detach()))
    return model.eval()


@contextlib.contextmanager
def _one_thread():
    """torch on one CPU thread inside, its count restored after. The ranker's tensors are small:
    on one thread its fit gives the same weights whatever torch's thread count, and a busy core
    cannot stall it (two threads with one core taken ran a 12-question fit 100x slower). The count
    is the process's: fits run in parallel threads would share it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def save_ranker(model: CandidateRanker, path: str | os.PathLike, meta: dict) -> None:
    """Write the weights and ``meta`` (feature names, encoder, settings) to ``path`` (safetensors)."""
    from safetensors.torch import save

    from hpengine.graph import write_atomic

    header = {"format": RANKER_FORMAT, "format_version": RANKER_VERSION, "hidden": model.hidden,
              "num_features": model.num_features, "adapter_dim": model.adapter_dim, "prior": model.prior,
              "prior_floor": model.prior_floor, **meta}
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    data = save(tensors, metadata={"hpengine": json.dumps(header)})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, data)  # whole before it replaces ``path``, in the user's file mode


def load_ranker(path: str | os.PathLike) -> tuple[CandidateRanker, dict]:
    """``(model, meta)`` of a ranker file written by :func:`save_ranker`.

    Raises:
        ValueError: not a ranker file of this version (one line naming it).
    """
    from safetensors import safe_open

    try:
        with safe_open(os.fspath(path), framework="pt") as f:
            header = _header(f)
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except FileNotFoundError:
        raise
    except Exception as exc:  # safetensors raises its own types for a damaged file
        raise ValueError(f"{path}: not a ranker file ({str(exc).splitlines()[0][:120]})") from None
    if header.get("format") != RANKER_FORMAT or header.get("format_version") != RANKER_VERSION:
        raise ValueError(f"{path}: not a {RANKER_FORMAT} file of version {RANKER_VERSION} "
                         f"(got {header.get('format')!r} {header.get('format_version')!r})")
    if type(header.get("prior", -1)) is not int:  # json's true would read as column 1
        raise ValueError(f"{path}: its header's prior is not a feature column (got {header.get('prior')!r})")
    try:  # a header without a prior: the score is the weights' alone
        model = CandidateRanker(int(header["num_features"]), int(header["hidden"]), int(header.get("adapter_dim", 0)),
                                int(header.get("prior", -1)), float(header.get("prior_floor", 0.02)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: its header does not describe a ranker ({str(exc).splitlines()[0][:120]})") from None
    misfit = _misfit(model.state_dict(), tensors)
    if misfit:
        raise ValueError(f"{path}: weights do not fit the ranker it describes ({misfit})")
    damaged = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if damaged or not bool((tensors["scale"] > 0).all()):  # NaN scores would order the candidates arbitrarily
        what = f"weights that are not finite ({', '.join(damaged[:3])})" if damaged else "a spread that is not positive"
        raise ValueError(f"{path}: {what}; the file is damaged")
    model.load_state_dict(tensors)
    return model.eval(), header


def is_ranker_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file whose header says it is a ranker (of any version): what a new
    ranker may replace."""
    from safetensors import safe_open

    if not os.path.isfile(path):  # a folder, a pipe (opening it would wait for a writer), nothing
        return False
    try:
        with safe_open(os.fspath(path), framework="pt") as f:
            return _header(f).get("format") == RANKER_FORMAT
    except Exception:  # not safetensors, not JSON, unreadable: not a ranker
        return False


def _header(f) -> dict:
    """The ranker header :func:`save_ranker` writes, from an open safetensors file (``{}`` if none)."""
    return json.loads((f.metadata() or {}).get("hpengine", "{}"))


def _misfit(expected: dict, found: dict) -> str:
    """The first weights of ``found`` that are missing, extra or of another shape than
    ``expected``'s, in a few words ("" when they fit)."""
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    shapes = [f"{k} is {list(found[k].shape)}, not {list(expected[k].shape)}" for k in expected
              if k in found and found[k].shape != expected[k].shape]
    words = ([f"missing {', '.join(missing[:3])}"] if missing else []) + \
        ([f"unexpected {', '.join(extra[:3])}"] if extra else []) + shapes[:2]
    return "; ".join(words)
