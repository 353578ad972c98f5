"""Settings shared by the end-to-end and analysis scripts: encoder presets (``conf/encoder/<name>.yaml``
on its schema, as the CLI composes it), the datasets, and ``--set`` overrides of config fields."""
from __future__ import annotations

import dataclasses
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
DATASETS = ("2wikimultihopqa", "hotpotqa", "musique")


def apply_overrides(cfg, assignments: list, prefix: str):
    """``cfg`` (a config dataclass) with the ``PREFIX.FIELD=VALUE`` entries of ``assignments``
    applied (``engine.num_hops=3``, ``retrieval.alpha=0.5``); entries of other prefixes, and fields
    ``cfg`` does not have (another method's setting), are skipped. Values take the field's current
    type; an unset (``None``) field takes a float or ``none``/``null``."""
    changes = {}
    for a in assignments:
        key, value = a.split("=", 1)
        if key.startswith(prefix + "."):
            field = key[len(prefix) + 1:]
            if field not in {f.name for f in dataclasses.fields(cfg)}:
                continue  # a setting of another method (engine.num_hops does not apply to dense)
            current = getattr(cfg, field)
            if current is None:  # an unset threshold (the encoder's): a number or null
                changes[field] = None if value.lower() in ("none", "null") else float(value)
            else:
                changes[field] = type(current)(value) if not isinstance(current, bool) else value.lower() == "true"
    return dataclasses.replace(cfg, **changes) if changes else cfg


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
