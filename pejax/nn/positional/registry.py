"""Registry of positional encodings by name: the ``pe`` field of :class:`DecoderConfig`.

Adding a PE: write one file with a :class:`PositionalEncoding` subclass and add one line to
``_REGISTRY`` below (or call :func:`register_pe` from user code before building the config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx

from pejax.nn.positional.alibi import AlibiPE
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.positional.learned import LearnedPE
from pejax.nn.positional.nope import NoPE
from pejax.nn.positional.rope import RotaryPE
from pejax.nn.positional.sinusoidal import SinusoidalPE
from pejax.nn.positional.t5 import T5BiasPE

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig

_REGISTRY: dict[str, type[PositionalEncoding]] = {
    "none": NoPE,
    "sinusoidal": SinusoidalPE,
    "learned": LearnedPE,
    "rope": RotaryPE,
    "alibi": AlibiPE,
    "t5": T5BiasPE,
}


def pe_names() -> tuple[str, ...]:
  """The registered PE names.

  Returns:
    Every name :func:`get_pe_class` accepts (``DecoderConfig.pe`` values), sorted.
  """
  return tuple(sorted(_REGISTRY))


def get_pe_class(name: str) -> type[PositionalEncoding]:
  """The PE class registered as ``name``.

  Args:
    name: a registry name, one of :func:`pe_names` (e.g. ``"rope"``).

  Returns:
    The :class:`PositionalEncoding` subclass registered under ``name``.

  Raises:
    ValueError: if ``name`` is not registered (the message lists the valid names).
  """
  if name not in _REGISTRY:
    raise ValueError(f"pe must be one of {list(pe_names())}, got {name!r}")
  return _REGISTRY[name]


def register_pe(name: str, pe_class: type[PositionalEncoding], *, overwrite: bool = False) -> None:
  """Registers ``pe_class`` under ``name`` so that ``DecoderConfig(pe=name)`` builds it.

  Args:
    name: registry name.
    pe_class: a :class:`PositionalEncoding` subclass with constructor ``(config, *, rngs)``.
    overwrite: replace an existing entry instead of raising.
  """
  if not isinstance(name, str) or not name:
    raise ValueError(f"name must be a non-empty string, got {name!r}")
  if not (isinstance(pe_class, type) and issubclass(pe_class, PositionalEncoding)):
    raise ValueError(f"pe_class must be a PositionalEncoding subclass, got {pe_class!r}")
  if name in _REGISTRY and not overwrite:
    raise ValueError(f"name {name!r} is already registered (pass overwrite=True to replace it)")
  _REGISTRY[name] = pe_class


def build_pe(config: "DecoderConfig", *, rngs: nnx.Rngs) -> PositionalEncoding:
  """Builds the PE named by ``config.pe``.

  Args:
    config: the decoder config; ``config.pe`` selects the class (see :func:`get_pe_class`) and
      the whole config is passed to its constructor.
    rngs: PRNG streams for the PE's parameters (learned tables, T5 bias).

  Returns:
    A new instance of the registered :class:`PositionalEncoding` subclass.

  Raises:
    ValueError: if ``config.pe`` is not registered.
  """
  return get_pe_class(config.pe)(config, rngs=rngs)
