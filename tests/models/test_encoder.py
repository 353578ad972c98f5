import copy
from pathlib import Path

import pytest
import torch

from hpengine.config import EncoderConfig
from hpengine.models import Encoder, resolve_model_path
from hpengine.models._encoder import mean_pool
from hpengine.testing import with_devices

TEXTS = [
    "Paris is the capital of France.",
    "A banana",
    "The Eiffel Tower was completed in 1889 for the World's Fair held in Paris.",
    "x",
    "",
    "Who directed the film that won the Palme d'Or in 1994?",
    "Marie Curie",
]


@pytest.fixture(scope="session")
def tiny_parts():
    """A random 2-layer BERT on the MiniLM vocabulary; built once, every test gets a deepcopy."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"), local_files_only=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    return BertModel(config).eval(), tokenizer


@pytest.fixture
def tiny(tiny_parts):
    model, tokenizer = tiny_parts
    return copy.deepcopy(model), tokenizer


def _reference(model, tokenizer, texts, pooling="mean", normalize=True):
    """Each text alone (no padding), pooled by hand."""
    rows = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=64)
            hidden = model(**batch).last_hidden_state[0].double()  # [T, D]
            mask = batch["attention_mask"][0].double()[:, None]
            emb = (hidden * mask).sum(0) / mask.sum() if pooling == "mean" else hidden[0]
            rows.append(emb / emb.norm() if normalize else emb)
    return torch.stack(rows).float()


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_per_text_reference(tiny, pooling, normalize):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny", batch_size=3, max_length=64, pooling=pooling,
                             normalize=normalize)
    out = enc.encode(TEXTS)
    assert out.dtype == torch.float32 and out.shape == (len(TEXTS), 32)
    torch.testing.assert_close(out, _reference(model, tokenizer, TEXTS, pooling, normalize), atol=1e-5, rtol=1e-5)


def test_order_restored_and_batch_size_invariant(tiny):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny", max_length=64)
    full = enc.encode(TEXTS, batch_size=64)
    for batch_size in (1, 3):
        torch.testing.assert_close(enc.encode(TEXTS, batch_size=batch_size), full, atol=1e-5, rtol=1e-5)
    perm = [3, 0, 6, 2, 5, 1, 4]
    torch.testing.assert_close(enc.encode([TEXTS[i] for i in perm], batch_size=2), full[perm], atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("budget", [1, 7, 40, 10_000])
def test_token_budget_batching_matches_reference(tiny, budget):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny", max_length=64, max_tokens_per_batch=budget)
    torch.testing.assert_close(enc.encode(TEXTS), _reference(model, tokenizer, TEXTS), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="max_tokens_per_batch"):
        Encoder.from_model(model, tokenizer, name="tiny", max_tokens_per_batch=-1)


def test_normalised_and_empty(tiny):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny")
    norms = enc.encode(TEXTS).norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms))
    empty = enc.encode([])
    assert empty.shape == (0, 32) and empty.dtype == torch.float32
    assert enc.dim == 32
    assert enc.name == "tiny|pooling=mean|normalize=True"


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [1e6, 1e6]]], dtype=torch.bfloat16)
    out = mean_pool(hidden, torch.tensor([[1, 1, 0]]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[2.0, 3.0]]))


@with_devices
def test_output_follows_model_device(tiny, device):
    model, tokenizer = tiny
    enc = Encoder.from_model(model.to(device), tokenizer, name="tiny")
    assert enc.encode(["a b", "c"]).device == torch.device(device)
    assert enc.encode([]).device == torch.device(device)


def test_bad_input(tiny):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny")
    with pytest.raises(TypeError, match=r"list of str \(got str\)"):
        enc.encode("Paris")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str \(got int\)"):
        enc.encode(["a", 3])
    with pytest.raises(ValueError, match=r"batch_size must be an int >= 1 \(got 0\)"):
        enc.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match=r"pooling must be one of \['cls', 'mean'\] \(got 'max'\)"):
        Encoder.from_model(model, tokenizer, name="tiny", pooling="max")
    with pytest.raises(TypeError, match="EncoderConfig"):
        Encoder({"name_or_path": "minilm"})


def test_resolve_model_path(tmp_path):
    path = resolve_model_path("minilm")
    assert path.endswith("model")
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)


@pytest.mark.slow
def test_real_minilm_semantics_and_sentence_transformers_parity():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    enc = Encoder(EncoderConfig(dtype="float32"))
    assert enc.dim == 384
    paris, paris_fr, banana = enc.encode(["Paris", "Paris, France", "banana"])
    assert paris @ paris_fr > paris @ banana
    ref_model = sentence_transformers.SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    ref = torch.as_tensor(ref_model.encode(TEXTS, normalize_embeddings=True))
    cos = (enc.encode(TEXTS) * ref).sum(-1)
    assert cos.min() > 0.999, cos
    bf16 = Encoder(EncoderConfig(dtype="bfloat16")).encode(TEXTS)
    assert (bf16 * ref).sum(-1).min() > 0.99


# ------------------------------------------------------------------ prompts by kind
def test_prompts_reach_the_model_by_kind(tiny):
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="tiny", max_length=64, query_prompt="query: ",
                             passage_prompt="passage: ")
    texts = ["Paris", "Who directed Jaws?"]
    seen = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["input_ids"]),
                                           with_kwargs=True)
    query, passage = enc.encode(texts, kind="query"), enc.encode(texts)  # passage is the default kind
    hook.remove()
    decoded = [tokenizer.decode(ids[ids != tokenizer.pad_token_id], skip_special_tokens=True) for ids in seen[0]]
    assert sorted(decoded) == sorted(tokenizer.decode(tokenizer("query: " + t)["input_ids"], skip_special_tokens=True)
                                     for t in texts)
    torch.testing.assert_close(query, _reference(model, tokenizer, ["query: " + t for t in texts]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(passage, _reference(model, tokenizer, ["passage: " + t for t in texts]), atol=1e-5,
                               rtol=1e-5)
    assert not torch.allclose(query, passage)
    assert enc.name == "tiny|pooling=mean|normalize=True|query_prompt='query: '|passage_prompt='passage: '"
    with pytest.raises(ValueError, match=r"kind must be one of \['query', 'passage'\] \(got 'question'\)"):
        enc.encode(texts, kind="question")


def test_no_prompts_keep_the_old_name_and_output(tiny):
    """Prompt-free encoders (MiniLM) keep the name of every index built before prompts, and both
    kinds embed the same."""
    model, tokenizer = tiny
    enc = Encoder.from_model(model, tokenizer, name="minilm", max_length=64)
    assert enc.name == "minilm|pooling=mean|normalize=True"
    torch.testing.assert_close(enc.encode(TEXTS, kind="query"), enc.encode(TEXTS, kind="passage"))


@pytest.fixture
def st_folder(tiny, tmp_path):
    """The tiny BERT saved as a sentence-transformers folder that declares E5-style prompts."""
    import json

    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "}}))
    return tmp_path


def test_loading_an_encoder_prints_no_bar_of_its_own(st_folder, capfd):
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    from hpengine.models._encoder import quiet_loading

    before = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    Encoder(EncoderConfig(name_or_path=str(st_folder), dtype="float32", max_length=64))
    assert "Loading weights" not in capfd.readouterr().err
    assert (hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()) == before  # as they were
    with quiet_loading():  # a download's bar (the hub's) stays as the user set it
        assert hub_utils.are_progress_bars_disabled() == before[1] and not hf_logging.is_progress_bar_enabled()


def test_folder_prompts_and_explicit_override(st_folder):
    cfg = EncoderConfig(name_or_path=str(st_folder), dtype="float32", max_length=64)
    enc = Encoder(cfg)
    assert enc.prompts == {"query": "query: ", "passage": "passage: "}  # "document" counts as passage
    assert Encoder.name_of(cfg) == enc.name and enc.config is cfg
    off = EncoderConfig(name_or_path=str(st_folder), dtype="float32", max_length=64, query_prompt="",
                        passage_prompt="doc: ")
    assert Encoder(off).prompts == {"query": "", "passage": "doc: "} and Encoder.name_of(off).endswith("'doc: '")
    with pytest.raises(ValueError, match="name_or_path is empty"):
        Encoder(EncoderConfig(name_or_path=""))


def test_built_alias_without_folder_says_how_to_build(tmp_path, monkeypatch):
    from hpengine.errors import UserError

    monkeypatch.setenv("HPENGINE_MODELS", str(tmp_path))
    with pytest.raises(UserError) as err:
        resolve_model_path("e5-small")
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "multilingual-e5-small") in message
    assert "get_embedder.py multilingual-e5-small" in message
    with pytest.raises(UserError, match="get_embedder.py"):
        Encoder.name_of(EncoderConfig(name_or_path="e5-small"))


def _e5_folder():
    from hpengine.models._encoder import models_dir

    for root in (models_dir(), Path("/work/models")):
        if (root / "multilingual-e5-small" / "config.json").is_file():
            return root
    return None


@pytest.mark.slow
def test_real_e5_small_with_its_preset(monkeypatch):
    """The folder get_embedder.py builds, with conf/encoder/e5-small.yaml (skipped when not built)."""
    from omegaconf import OmegaConf

    root = _e5_folder()
    if root is None:
        pytest.skip("multilingual-e5-small not built (python ../shared/models/get_embedder.py multilingual-e5-small)")
    monkeypatch.setenv("HPENGINE_MODELS", str(root))
    preset = OmegaConf.load(Path(__file__).parents[2] / "conf" / "encoder" / "e5-small.yaml")
    preset.pop("defaults")
    cfg = EncoderConfig(**{**OmegaConf.to_container(preset), "dtype": "float32"})
    enc = Encoder(cfg)
    assert enc.dim == 384 and enc.prompts == {"query": "query: ", "passage": "passage: "}
    q = enc.encode(["Who wrote the play Hamlet?"], kind="query")
    p = enc.encode(["Hamlet is a tragedy written by William Shakespeare.", "Bananas are yellow fruit."])
    sims = (q @ p.T)[0]
    assert sims[0] > sims[1]
    # the prompt matters: the same text embedded as a passage is another vector
    assert (q - enc.encode(["Who wrote the play Hamlet?"])).norm() > 1e-3


# ------------------------------------------------------------------ a name_or_path that holds no model
@pytest.mark.parametrize("make, found", [
    (lambda tmp: tmp / "missing", "no such folder"),
    (lambda tmp: tmp / "a" / "b" / "c", "no such folder"),
    (lambda tmp: (tmp / "weights.bin").write_bytes(b"1234") and tmp / "weights.bin", "got a file of 4 bytes"),
    (lambda tmp: tmp, "holds no model (no config.json)"),
    (lambda tmp: (tmp / "notes.txt").write_text("x") and tmp, "got 1 entry: notes.txt"),
    (lambda tmp: (tmp / "config.json").write_text("{}") and tmp, "has config.json but no weights file"),
])
def test_name_or_path_without_a_model_is_one_user_error(tmp_path, monkeypatch, make, found):
    from hpengine.errors import UserError

    path = str(make(tmp_path))
    monkeypatch.setattr("transformers.AutoModel.from_pretrained", _must_not_load)
    with pytest.raises(UserError) as err:
        Encoder(EncoderConfig(name_or_path=path))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"encoder.name_or_path={path!r}") and found in message


def _must_not_load(*args, **kwargs):
    raise AssertionError("the model must not load before the path is checked")


def test_hub_name_not_in_the_cache_is_one_user_error(monkeypatch, tmp_path):
    from hpengine.errors import UserError

    monkeypatch.chdir(tmp_path)  # no folder of that name here
    with pytest.raises(UserError, match=r"^encoder.name_or_path='hpengine-test/no-such-model': no such folder "
                                        r"here, and no Hugging Face model of that name in the local cache"):
        Encoder(EncoderConfig(name_or_path="hpengine-test/no-such-model"))


def test_folder_transformers_cannot_read_is_one_user_error(tiny, tmp_path):
    from hpengine.errors import UserError

    model, _ = tiny
    model.save_pretrained(tmp_path)  # weights and config, no tokenizer files
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(UserError) as err:
        Encoder(EncoderConfig(name_or_path=str(tmp_path), dtype="float32"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"encoder.name_or_path={str(tmp_path)!r}: cannot load")


def test_cli_reports_a_bad_encoder_path_in_one_line(tmp_path, capsys):
    from hpengine.graph import builtin_corpus_path
    from hpengine.cli import main

    missing = tmp_path / "no-model"
    with pytest.raises(SystemExit) as exit_:
        main(["index", f"corpus={builtin_corpus_path()}", f"out={tmp_path / 'idx'}",
              f"encoder.name_or_path={missing}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip() == (f"hpengine: error: encoder.name_or_path={str(missing)!r}: no such folder; name a model "
                           f"folder (config.json and model.safetensors or pytorch_model.bin), minilm, e5-small or a "
                           f"Hugging Face model name (got nothing at {str(missing)!r})")
    assert not (tmp_path / "idx").exists()


def test_auto_dtype_is_bfloat16_only_where_the_device_has_it_natively(tiny_parts, tmp_path, monkeypatch):
    from hpengine.models import _encoder

    assert EncoderConfig().dtype == "auto"
    assert _encoder.resolve_dtype("auto", "cuda:0") == torch.bfloat16
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda native=native: native)
        assert _encoder.native_bfloat16("cpu") is native
        assert _encoder.resolve_dtype("auto", "cpu") == expected
    for name in ("float32", "bfloat16", "float16"):  # named dtypes are taken as they are, on any device
        assert _encoder.resolve_dtype(name, "cpu") == getattr(torch, name)
    with pytest.raises(ValueError, match="encoder.dtype must be one of .*'auto'.* \\(got 'half'\\)"):
        _encoder.resolve_dtype("half")
    with pytest.raises(ValueError, match="encoder.dtype"):
        EncoderConfig(dtype="half")
    model, tokenizer = tiny_parts  # the loaded model carries the resolved dtype
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    enc = Encoder(EncoderConfig(name_or_path=str(tmp_path), dtype="auto"))
    assert next(enc.model.parameters()).dtype == torch.float32  # the patched CPU lacks native bfloat16
