"""``pejax.generate``: greedy output equals transformers' greedy ``generate``; stops; compiles once.

transformers' outputs (tests/hf/fixtures/expected.json) come from three prompts of different
lengths, left-padded with an attention mask, 8 new tokens, no stop token. transformers' KV cache
keeps rotated keys, so the models load with ``cache_rotated_keys=True`` (this matters for
dynamic NTK and LongRoPE past the original length); Phi-3 instead recomputes its cache when the
sequence crosses the LongRoPE switch, which pejax's default cache (keys re-rotated each step)
reproduces on this fixture.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pejax
from pejax.nn import generation
import fixture_cases as fx

# One model in the fast tier (a generate compilation costs seconds); its program is reused by
# the other fast tests. Sliding window + left padding + GQA: the mask logic is exercised.
FAST = "mistral_sliding_window"
PROMPTS = fx.EXPECTED["gen_prompts"]
NEW = fx.EXPECTED["new_tokens"]


def _model(name):
  return fx.load(name, cache_rotated_keys=not name.startswith("phi3"))


def _greedy(name):
  return fx.EXPECTED["cases"][name]["greedy"]


class GenerateTest(parameterized.TestCase):

  def test_greedy_equals_transformers_compiled_once(self):
    model = _model(FAST)
    width = max(map(len, PROMPTS))
    tokens = np.asarray([[0] * (width - len(p)) + p for p in PROMPTS], np.int32)
    mask = (np.arange(width)[None, :] >= (width - np.asarray([len(p) for p in PROMPTS]))[:, None])
    before = generation._generate._cache_size()  # pylint: disable=protected-access
    out = pejax.generate(model, PROMPTS, max_new_tokens=NEW)  # Ragged: left-padded here.
    self.assertEqual(out.dtype, jnp.int32)
    self.assertEqual(np.asarray(out).tolist(), _greedy(FAST))
    same = pejax.generate(model, tokens, prompt_mask=mask.astype(np.int32), max_new_tokens=NEW)
    self.assertEqual(np.asarray(same).tolist(), _greedy(FAST))
    other = pejax.generate(model, (tokens + 7) % 256, prompt_mask=mask.astype(np.int32),
                           max_new_tokens=NEW)
    self.assertNotEqual(np.asarray(other).tolist(), _greedy(FAST))
    # Three calls with new values, one program (not one per call or per token).
    compiled = generation._generate._cache_size()  # pylint: disable=protected-access
    self.assertLessEqual(compiled - before, 1)

  @parameterized.named_parameters((name, name) for name in fx.CASES if name != FAST)
  @pytest.mark.slow
  def test_greedy_equals_transformers(self, name):
    out = pejax.generate(_model(name), PROMPTS, max_new_tokens=NEW)
    self.assertEqual(np.asarray(out).tolist(), _greedy(name))

  def test_stop_token_ends_a_row(self):
    model = _model(FAST)
    greedy = _greedy(FAST)
    stop = greedy[0][2]
    out = np.asarray(pejax.generate(model, PROMPTS, max_new_tokens=NEW, stop_tokens=[stop],
                                    pad_token=0))
    for row, expected in zip(out.tolist(), greedy):
      if stop in expected:
        end = expected.index(stop) + 1
        self.assertEqual(row, expected[:end] + [0] * (NEW - end))
      else:
        self.assertEqual(row, expected)
    self.assertEqual(out[0].tolist()[:3], greedy[0][:3])

  def test_bad_arguments_name_themselves(self):
    model = _model("gemma")
    cases = [
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=2, temperature=1.0), "rng must be a PRNG key"),
        (dict(max_new_tokens=2, temperature=-1.0), "temperature must be"),
        (dict(max_new_tokens=2, top_k=3), "top_k / top_p only apply"),
        (dict(max_new_tokens=2, temperature=1.0, rng=jax.random.PRNGKey(0), top_p=1.5),
         "top_p must be in"),
        (dict(max_new_tokens=2, stop_tokens=[999]), "stop_tokens must be in"),
        (dict(max_new_tokens=2, pad_token=-1), "pad_token must be in"),
    ]
    for kwargs, message in cases:
      with self.assertRaisesRegex(ValueError, message):
        pejax.generate(model, PROMPTS, **kwargs)
    with self.assertRaisesRegex(ValueError, r"prompt_tokens must be in \[0, vocab_size=256\)"):
      pejax.generate(model, [[1, 300]], max_new_tokens=2)
    with self.assertRaisesRegex(ValueError, "prompt_mask must describe left padding"):
      pejax.generate(model, np.ones((1, 3), np.int32), prompt_mask=np.array([[1, 1, 0]]),
                     max_new_tokens=2)
    with self.assertRaisesRegex(ValueError, "at least one token"):
      pejax.generate(model, [[1], []], max_new_tokens=2)


class SampleLogitsTest(absltest.TestCase):

  def test_greedy_is_first_argmax(self):
    logits = jnp.asarray([[0.0, 3.0, 3.0, 1.0]])
    self.assertEqual(int(pejax.nn.sample_logits(logits, None)[0]), 1)

  def test_top_k_and_top_p_restrict_the_support(self):
    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 400)

    def draws(**kwargs):
      sample = jax.jit(jax.vmap(lambda k: pejax.nn.sample_logits(
          logits, k, temperature=1.0, **kwargs)[0]))
      return set(np.asarray(sample(keys)).tolist())

    self.assertEqual(draws(top_k=2), {0, 1})
    self.assertEqual(draws(top_p=0.7), {0, 1})   # 0.5 < 0.7 <= 0.8: the first two tokens.
    self.assertEqual(draws(top_p=0.45), {0})     # The first token alone reaches 0.45.


if __name__ == "__main__":
  absltest.main()
