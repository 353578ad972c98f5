"""Encoder presets for the benchmarks: ``conf/encoder/<name>.yaml`` on its schema, as the CLI composes it."""
from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"


def encoder_preset(name: str, **runtime):
    """The :class:`~hpengine.config.EncoderConfig` of ``conf/encoder/<name>.yaml`` (``minilm``,
    ``e5-small``), or of a model folder ``name`` with the schema defaults; ``runtime`` (device,
    dtype, ...) overrides it."""
    from omegaconf import OmegaConf

    from hpengine.config import EncoderConfig

    file = CONF / "encoder" / f"{name}.yaml"
    if not file.is_file():
        return EncoderConfig(name_or_path=name, **runtime)
    values = OmegaConf.to_container(OmegaConf.load(file))
    values.pop("defaults", None)
    return EncoderConfig(**{**values, **runtime})
