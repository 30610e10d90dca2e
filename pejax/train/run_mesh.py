"""The device mesh of a run, from the experiment config's ``mesh`` section.

Kept in ``pejax.train`` rather than ``pejax.parallel``: it reads the experiment config (a layer
above ``pejax.parallel``) and the decoder's shapes (``pejax.nn``, also above it), and raises the
config's :class:`~pejax.experiment_config.ConfigError`; ``pejax.parallel`` stays free of both
and provides the pieces (:func:`~pejax.parallel.parse_mesh_spec`,
:func:`~pejax.parallel.check_mesh_fits`, :func:`~pejax.parallel.make_mesh`).
"""

from __future__ import annotations

from typing import Optional

import jax
import ml_collections

from pejax import experiment_config
from pejax import parallel
from pejax.experiment_config import ConfigError
from pejax.nn import DecoderConfig


def mesh_settings(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``config.mesh`` with defaults filled in (configs written before it existed lack it).

  Args:
    config: the experiment config.

  Returns:
    A new ``mesh`` section (``spec``, ``distributed``, ``coordinator_address``, ...).
  """
  settings = experiment_config.get_default_config().mesh
  given = config.get("mesh")
  if given is not None:
    settings.update(given.to_dict() if hasattr(given, "to_dict") else dict(given))
  return settings


def make_run_mesh(config: ml_collections.ConfigDict,
                  model_config: DecoderConfig) -> Optional[jax.sharding.Mesh]:
  """The device mesh of a run, or ``None`` for a one-device run without ``mesh.spec``.

  Checks that the mesh divides the global batch, the heads, the MLP width and the vocabulary
  before anything is placed.

  Args:
    config: the experiment config (``mesh.spec``, ``data.batch_size``).
    model_config: the decoder to place.

  Returns:
    The mesh, or ``None``.

  Raises:
    ConfigError: naming the hyper-parameter and the mesh axis that do not fit.
  """
  settings = mesh_settings(config)
  spec = str(settings.spec or "")
  if not spec and jax.device_count() == 1:
    return None
  try:
    axis_sizes = parallel.parse_mesh_spec(spec, jax.device_count())
    parallel.check_mesh_fits(
        axis_sizes, batch_size=int(config.data.batch_size), num_heads=model_config.num_heads,
        num_kv_heads=model_config.kv_heads, d_model=model_config.d_model,
        mlp_hidden=model_config.mlp_hidden, vocab_size=model_config.vocab_size,
        num_processes=jax.process_count())
  except ValueError as e:
    raise ConfigError(f"mesh {spec or '(all devices on data)'!r}: {e}") from None
  return parallel.make_mesh(spec)
