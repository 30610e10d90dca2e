"""Looking PEs up by name: discovery of the built-in PE files, names, configs and instances.

Every module of :mod:`pejax.nn.positional` (but this one and the interface) is imported on the
first lookup; each registers itself with ``@register_pe``. A user PE registers with
:func:`~pejax.nn.positional.interface.register_pe` from its own module, before it is named.
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
from typing import Any, Union

from flax import nnx

from pejax.nn.positional import interface
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, RegistryEntry

_NOT_PES = ("interface", "registry")
_discovered = False


def discover() -> None:
  """Imports every PE module of :mod:`pejax.nn.positional` once (they register themselves)."""
  global _discovered
  if _discovered:
    return
  _discovered = True
  package = __name__.rpartition(".")[0]  # This file's package, without importing it.
  for info in pkgutil.iter_modules([str(pathlib.Path(__file__).parent)]):
    if not info.ispkg and info.name not in _NOT_PES and not info.name.startswith("_"):
      importlib.import_module(f"{package}.{info.name}")


def pe_names() -> tuple[str, ...]:
  """The registered PE names.

  Returns:
    Every name :func:`get_pe_class` accepts (``DecoderConfig.pe`` values), sorted.
  """
  discover()
  return tuple(sorted(interface._REGISTRY))  # pylint: disable=protected-access


def registry_entry(name: str) -> RegistryEntry:
  """The registry entry of ``name`` (class and the config fields the name presets).

  Args:
    name: a registry name, one of :func:`pe_names`.

  Returns:
    The :class:`~pejax.nn.positional.interface.RegistryEntry`.

  Raises:
    ValueError: if ``name`` is not registered (the message lists the valid names).
  """
  discover()
  entries = interface._REGISTRY  # pylint: disable=protected-access
  if not isinstance(name, str) or name not in entries:
    raise ValueError(f"pe must be one of {list(pe_names())}, got {name!r}")
  return entries[name]


def get_pe_class(name: str) -> type[PositionalEncoding]:
  """The PE class registered as ``name``.

  Args:
    name: a registry name, one of :func:`pe_names` (e.g. ``"rope"``).

  Returns:
    The :class:`PositionalEncoding` subclass registered under ``name``.

  Raises:
    ValueError: if ``name`` is not registered (the message lists the valid names).
  """
  return registry_entry(name).pe_class


def pe_config(name: str, **fields: Any) -> PEConfig:
  """The config of the PE named ``name``, with its defaults and any ``fields`` overridden.

  Args:
    name: a registry name.
    **fields: config fields (e.g. ``base=500000.0`` for ``"rope"``).

  Returns:
    A validated :class:`PEConfig` instance.

  Raises:
    ValueError: for an unknown name or field, or an invalid value (naming the field).
  """
  return registry_entry(name).make_config(**fields)


def as_pe_config(pe: Union[str, PEConfig]) -> PEConfig:
  """Normalizes a ``DecoderConfig.pe`` entry: a name gives its default config.

  Args:
    pe: a registry name or a :class:`PEConfig`.

  Returns:
    The :class:`PEConfig`.

  Raises:
    ValueError: for an unknown name or an object that is neither.
  """
  if isinstance(pe, PEConfig):
    pe_name_of(pe)  # Raises if its class is not registered.
    return pe
  if isinstance(pe, str):
    return pe_config(pe)
  raise ValueError(f"pe must be a registry name or a PEConfig, got {pe!r}")


def pe_class_of(config: PEConfig) -> type[PositionalEncoding]:
  """The PE class that serves ``config``.

  Args:
    config: a registered PE's config.

  Returns:
    Its :class:`PositionalEncoding` subclass.
  """
  return get_pe_class(pe_name_of(config))


def build_pe(config: PEConfig, model: ModelDims, *, rngs: nnx.Rngs) -> PositionalEncoding:
  """Builds the PE that ``config`` describes for the decoder ``model``.

  Args:
    config: the PE's config.
    model: the decoder config (dimensions).
    rngs: PRNG streams for the PE's parameters.

  Returns:
    A new instance of the registered :class:`PositionalEncoding` subclass.
  """
  return pe_class_of(config)(config, model, rngs=rngs)


def pe_name_of(config: PEConfig) -> str:
  """The registry name of a PE config: the entry of its class whose presets it matches best.

  Args:
    config: a :class:`PEConfig` instance.

  Returns:
    The registry name (``"kerple_power"`` for a KERPLE config with ``kind="power"``).

  Raises:
    ValueError: if no registered PE uses the config's class.
  """
  discover()
  name = interface.registered_name(config)
  if name is None:
    raise ValueError(f"no registered PE uses config class {type(config).__name__}")
  return name
