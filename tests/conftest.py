"""Test-suite setup shared by every test module."""

import os

# Tests run on the CPU with deterministic float32 math; set before jax is imported anywhere.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # pylint: disable=g-import-not-at-top

# absltest / chex helpers read absl flags; under pytest nobody parses them, so mark them parsed.
flags.FLAGS.mark_as_parsed()

# --- Hypothesis profiles of the fuzz suite (tests/fuzz, issue 16) ------------------------------
# "default": few draws, no deadline (the first draw compiles), derandomized (deterministic CI).
# "long": many random draws; select it with --hypothesis-profile=long or HYPOTHESIS_PROFILE=long.
from hypothesis import HealthCheck, settings  # pylint: disable=g-import-not-at-top,wrong-import-position

settings.register_profile(
    "default", max_examples=20, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large))
settings.register_profile(
    "long", max_examples=1000, deadline=None, derandomize=False, print_blob=True,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
# --- end of the hypothesis profiles ------------------------------------------------------------
