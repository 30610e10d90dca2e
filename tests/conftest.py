"""Test-suite setup shared by every test module."""

import os

# Tests run on the CPU with deterministic float32 math; set before jax is imported anywhere.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # pylint: disable=g-import-not-at-top

# absltest / chex helpers read absl flags; under pytest nobody parses them, so mark them parsed.
flags.FLAGS.mark_as_parsed()
