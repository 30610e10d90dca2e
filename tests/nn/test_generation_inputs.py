"""Generation and sampling never answer a bad setting or a poisoned row with a token.

Counts and ids are integers (2.5 is not 2, True is not 1); temperatures are finite and >= 0;
``top_k`` / ``top_p`` can never mask every token; a row whose logits are NaN (the decoder's
poison for an out-of-range position or token under jit) samples ``-1``, never a finite id;
``generate`` refuses to run past a learned position table and raises if a row was poisoned.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

import pejax
from pejax.nn import Decoder, DecoderConfig
from pejax.nn.positional.learned import LearnedConfig

TINY = dict(vocab_size=32, d_model=16, num_heads=2, num_layers=1)
PROMPT = np.array([[1, 2, 3, 4]], np.int32)
KEY = jax.random.PRNGKey(0)


def _model(**overrides) -> Decoder:
  return Decoder(DecoderConfig(**{**TINY, **overrides}), rngs=nnx.Rngs(0))


MODEL = _model()
LEARNED = _model(pe=LearnedConfig(max_position=8))


class GenerateArgumentsTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(max_new_tokens=2.5), "max_new_tokens"),
      (dict(max_new_tokens=True), "max_new_tokens"),
      (dict(max_new_tokens=2, pad_token=2.5), r"pad_token must be an integer, got 2\.5"),
      (dict(max_new_tokens=2, pad_token=True), "pad_token must be an integer, got True"),
      (dict(max_new_tokens=2, pad_token=32), r"pad_token must be in \[0, vocab_size=32\)"),
      (dict(max_new_tokens=2, stop_tokens=[2.5]), r"stop_tokens must be an integer, got 2\.5"),
      (dict(max_new_tokens=2, stop_tokens=[False]), "stop_tokens must be an integer"),
      (dict(max_new_tokens=2, stop_tokens="ab"), "stop_tokens must be a sequence"),
      (dict(max_new_tokens=2, stop_tokens=3), "stop_tokens must be a sequence"),
      (dict(max_new_tokens=2, temperature=True), "temperature must be a finite number"),
      (dict(max_new_tokens=2, temperature=float("nan")), "temperature must be a finite"),
      (dict(max_new_tokens=2, temperature=-0.5), "temperature must be a finite number >= 0"),
      (dict(max_new_tokens=2, temperature="1"), "temperature must be a finite number"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_k=2.5), "top_k must be an integer"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_k=True), "top_k must be an integer"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_k=0), r"top_k must be >= 1"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_p=0.0), r"top_p must be in \(0, 1\]"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_p=True), r"top_p must be in"),
      (dict(max_new_tokens=2, temperature=1.0, rng=KEY, top_p=float("nan")), "top_p must be"),
      (dict(max_new_tokens=2, top_p=0.5), "only apply when sampling"),
  )
  def test_bad_setting_names_itself(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      pejax.generate(MODEL, PROMPT, **kwargs)

  def test_numpy_integers_are_integers(self):
    out = pejax.generate(MODEL, PROMPT, max_new_tokens=np.int64(2), pad_token=np.int32(0),
                         stop_tokens=[np.int64(5)], temperature=np.float32(0.0))
    self.assertEqual(out.shape, (1, 2))

  def test_past_a_learned_table_is_an_error_naming_the_count(self):
    self.assertEqual(pejax.generate(LEARNED, PROMPT, max_new_tokens=4).shape, (1, 4))
    with self.assertRaisesRegex(ValueError, r"max_new_tokens=5 .* reaches position 8, past the "
                                r"LearnedPE's max_length=8"):
      pejax.generate(LEARNED, PROMPT, max_new_tokens=5)

  def test_a_poisoned_model_raises_instead_of_returning_tokens(self):
    model = _model()
    nnx.update(model, jax.tree.map(lambda p: jnp.full_like(p, jnp.nan),
                                   nnx.state(model, nnx.Param)))
    with self.assertRaisesRegex(ValueError, "logits were NaN .* token 0 of row 0"):
      pejax.generate(model, PROMPT, max_new_tokens=3)


class SampleLogitsTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(temperature=-1.0), "temperature must be a finite number >= 0"),
      (dict(temperature=float("nan")), "temperature must be a finite"),
      (dict(temperature=True), "temperature must be"),
      (dict(temperature=1.0, top_p=0.0), r"top_p must be in \(0, 1\]"),
      (dict(temperature=1.0, top_p=1.5), r"top_p must be in \(0, 1\]"),
      (dict(temperature=1.0, top_k=0), "top_k must be >= 1"),
      (dict(temperature=1.0, top_k=1.5), "top_k must be an integer"),
      (dict(temperature=0.0, top_k=2), "only apply when sampling"),
  )
  def test_bad_setting_names_itself(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      pejax.nn.sample_logits(jnp.zeros((2, 5)), KEY, **kwargs)

  def test_bad_logits_and_missing_key(self):
    with self.assertRaisesRegex(ValueError, r"logits must be a float \[B, V\] array"):
      pejax.nn.sample_logits(jnp.zeros((5,)), None)
    with self.assertRaisesRegex(ValueError, r"logits must be a float \[B, V\] array"):
      pejax.nn.sample_logits(jnp.zeros((2, 5), jnp.int32), None)
    with self.assertRaisesRegex(ValueError, "key must be a PRNG key when temperature > 0"):
      pejax.nn.sample_logits(jnp.zeros((2, 5)), None, temperature=1.0)

  @parameterized.parameters(dict(temperature=0.0), dict(temperature=1.0),
                            dict(temperature=0.7, top_k=2, top_p=0.9))
  def test_poisoned_rows_give_minus_one_eager_and_jitted(self, **settings):
    logits = jnp.array([[0.0, 3.0, 1.0], [0.0, jnp.nan, 1.0], [-jnp.inf] * 3, [5.0, 0, 0]])
    sample = lambda x, k: pejax.nn.sample_logits(x, k, **settings)  # noqa: E731
    for fn in (sample, jax.jit(sample)):
      tokens = np.asarray(fn(logits, KEY))
      np.testing.assert_array_equal(tokens[1:3], [-1, -1])
      self.assertTrue(0 <= tokens[0] < 3 and 0 <= tokens[3] < 3)
    if settings["temperature"] == 0.0:
      np.testing.assert_array_equal(np.asarray(sample(logits, None))[[0, 3]], [1, 0])


if __name__ == "__main__":
  absltest.main()
