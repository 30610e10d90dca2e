"""Which PEs a study runs, chosen by the capabilities of the registered PE classes.

Studies never list PE names: they ask the registry (:func:`runnable_pes`) and the PE classes
(bounded tables, hooks, translation invariance, content awareness), so a PE added as one file
joins every study that selects with these functions.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import ml_collections


def layer_pes(config: ml_collections.ConfigDict) -> tuple:
  """The PE instance of each layer of the decoder ``config`` describes, built abstractly.

  Capabilities that an instance refines from its config (``max_length`` of a learned table,
  ``length_dependent`` of a RoPE scaling) are read here without computing any parameter.

  Args:
    config: an experiment config.

  Returns:
    One :class:`~pejax.nn.PositionalEncoding` per layer (shape-only parameters).

  Raises:
    pejax.experiment_config.ConfigError: if the config cannot build a decoder.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  model_config = decoder_from_config.decoder_config_from(config)
  return tuple(nnx.eval_shape(lambda c=pe: registry.build_pe(c, model_config,
                                                             rngs=nnx.Rngs(0)))
               for pe in model_config.layer_pes)


def pe_max_length(config: ml_collections.ConfigDict) -> Optional[int]:
  """Largest position + 1 the config's PE can encode (its ``max_length``), ``None`` if unbounded.

  Args:
    config: an experiment config.

  Returns:
    The smallest ``max_length`` over the layers' PEs (a learned table's size), or ``None``.
  """
  limits = [pe.max_length for pe in layer_pes(config) if pe.max_length is not None]
  return min(limits) if limits else None


def runnable_pes(config: ml_collections.ConfigDict,
                 accept: Optional[Callable[[Any], bool]] = None) -> tuple:
  """Every registered PE that can serve the decoder of ``config``, in registry order.

  A PE can when its default config (experiment defaults filled in, e.g. a learned table of
  ``data.train_len`` rows) builds a decoder with the config's dimensions, and ``accept`` (a
  predicate on the PE class, i.e. its capabilities) holds. A PE added as one file joins every
  study that selects with this.

  Args:
    config: the study's base experiment config (its ``pe`` section is replaced per name).
    accept: optional capability filter on the PE class.

  Returns:
    Registry names.
  """
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  names = []
  for name in registry.pe_names():
    if accept is not None and not accept(registry.get_pe_class(name)):
      continue
    trial = config.copy_and_resolve_references()
    with trial.unlocked():
      for key in trial.pe.keys():
        if key not in ("name", "randomized_max_position"):
          trial.pe[key] = None
      trial.pe.name = name
    try:
      decoder_from_config.decoder_config_from(trial)
    except experiment_config.ConfigError:
      continue
    names.append(name)
  return tuple(names)


def pe_class(name: str):
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  return registry.get_pe_class(name) if name in registry.pe_names() else None


# Hooks that receive position ids as values: randomized positions change what they see.
_POSITION_ID_HOOKS = ("embed", "rotate", "bias", "content_bias", "logits")
# Hooks of PEs that encode order through the attention operator itself (PaTH's per-token
# transforms, stick-breaking's causal products), not through position values.
_OPERATOR_HOOKS = ("features", "attend")


def _overrides_any(name: str, hooks: tuple) -> bool:
  cls = pe_class(name)
  return True if cls is None else any(cls.overrides(hook) for hook in hooks)


def uses_positions(name: str) -> bool:
  """Whether the registered PE ``name`` encodes order at all: it overrides any hook, the
  attention-operator hooks included (NoPE: False; PaTH, stick-breaking: True; unknown: True).

  This is the "NoPE" test of the studies: a PE that owns its attention operator is a position
  encoding in its paper's sense even though it reads no position ids.
  """
  return _overrides_any(name, _POSITION_ID_HOOKS + _OPERATOR_HOOKS)


def takes_position_ids(name: str) -> bool:
  """Whether the registered PE ``name`` reads position ids as values (unknown: True), i.e.
  whether randomized positions (Ruoss et al. 2023) give it a different model: NoPE, PaTH and
  stick-breaking do not."""
  return _overrides_any(name, _POSITION_ID_HOOKS)


def is_absolute(name: str) -> bool:
  cls = pe_class(name)
  return bool(cls is not None and cls.absolute)


def is_content_aware(name: str) -> bool:
  cls = pe_class(name)
  return bool(cls is not None and cls.content_aware)


def is_relative_bias(name: str) -> bool:
  """A translation-invariant bias of positions only (T5, ALiBi, KERPLE, Sandwich)."""
  cls = pe_class(name)
  return bool(cls is not None and cls.translation_invariant and not cls.content_aware
              and cls.overrides("bias") and not cls.overrides("rotate"))
