"""Tests of pejax.nn.Decoder with every registered positional encoding."""

from __future__ import annotations

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings.rope_scaling import YaRNScaling
from pejax.nn import Decoder, DecoderConfig, pe_names
from pejax.nn.positional import LearnedConfig, RotaryConfig
from pejax.nn.positional import registry

TINY = dict(vocab_size=32, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block_size=4)

# Every registered PE (read from the registry: a PE added as one file is tested here without an
# edit), each with its default config, plus RoPE variants (layout, partial rotary, a scaling with
# an attention factor). Dynamic NTK is tested in test_kv_cache.py. Tests that need a kind of PE
# select it by the capabilities the PE classes declare, never by name.
PE_NAMES = pe_names()
PE_CASES = tuple((name, dict(pe=name)) for name in PE_NAMES) + (
    ("rope_interleaved_partial", dict(pe=RotaryConfig(layout="interleaved", fraction=0.5))),
    ("rope_yarn", dict(pe=RotaryConfig(scaling=YaRNScaling(factor=4.0, original_max_position=8)))),
)


def _has_no_hook(model: Decoder) -> bool:
  """Whether no layer's PE changes anything (the decoder is then position-blind)."""
  return not any(pe.has_embed or pe.has_rotate or pe.has_bias or pe.has_content_bias
                 or pe.has_logits or pe.has_attend for pe in model.layer_pes())


def _model(**overrides) -> Decoder:
  return Decoder(DecoderConfig(**{**TINY, **overrides}), rngs=nnx.Rngs(0))


def _tokens(batch, length, seed=0):
  return jax.random.randint(jax.random.key(seed), (batch, length), 0, TINY["vocab_size"],
                            dtype=jnp.int32)


def _randomize_pe_params(model: Decoder, seed: int = 1) -> None:
  """Gives learned PE parameters (every layer's) unit-scale random values."""
  state = nnx.state(model.pes, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), max(len(leaves), 1))
  new = [jax.random.normal(key, leaf.shape, leaf.dtype) for key, leaf in zip(keys, leaves)]
  nnx.update(model.pes, jax.tree.unflatten(treedef, new))


_forward = nnx.jit(lambda model, tokens, positions, segment_ids: model(
    tokens, positions=positions, segment_ids=segment_ids))
_forward_blockwise = nnx.jit(lambda model, tokens, positions, segment_ids: model(
    tokens, positions=positions, segment_ids=segment_ids, attention="blockwise"))
_prefill = nnx.jit(lambda model, tokens, cache: model.prefill(tokens, None, cache))
_decode = nnx.jit(lambda model, token, position, cache: model.decode_step(token, position, cache))


class DecoderPerPETest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def test_every_registered_pe_is_covered(self):
    covered = {DecoderConfig(**{**TINY, **case[1]}).pe_name for case in PE_CASES}
    self.assertEmpty(set(pe_names()) - covered, "registered PEs without decoder tests")
    for name in pe_names():  # The capabilities the tests below select by are declared.
      for attribute in ("absolute", "translation_invariant", "supports_blockwise"):
        self.assertIsInstance(getattr(registry.get_pe_class(name), attribute), bool)

  @parameterized.named_parameters(*PE_CASES)
  def test_shapes_dtype_finite(self, options):
    model = _model(**options)
    logits = _forward(model, _tokens(2, 13), None, None)
    chex.assert_shape(logits, (2, 13, TINY["vocab_size"]))
    chex.assert_type(logits, jnp.float32)
    chex.assert_tree_all_finite(logits)

  @parameterized.named_parameters(*PE_CASES)
  @pytest.mark.slow
  def test_no_retrace_on_repeated_calls(self, options):
    chex.clear_trace_counter()  # The counter is keyed by function location, shared by cases.
    graphdef, state = nnx.split(_model(**options))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def forward(state, tokens, positions):
      return nnx.merge(graphdef, state)(tokens, positions=positions)

    positions = jnp.tile(jnp.arange(13, dtype=jnp.int32)[None, :], (2, 1))
    for seed in range(3):
      forward(state, _tokens(2, 13, seed), positions + seed)

  @parameterized.named_parameters(*PE_CASES)
  @pytest.mark.slow
  def test_blockwise_equals_dense(self, options):
    # 13 tokens in tiles of 4: the last tile is padded, the causal tiles above it skipped.
    model = _model(**options)
    tokens = _tokens(2, 13)
    positions = jnp.array([np.arange(13), np.arange(13) + 3], jnp.int32)
    dense = _forward(model, tokens, positions, None)
    if not model.pe.supports_blockwise:  # Dense-only PEs say so instead of computing garbage.
      with self.assertRaisesRegex(ValueError, "does not support blockwise"):
        _forward_blockwise(model, tokens, positions, None)
      return
    blockwise = _forward_blockwise(model, tokens, positions, None)
    chex.assert_trees_all_close(blockwise, dense, atol=2e-5, rtol=2e-5)

  @parameterized.named_parameters(*PE_CASES)
  @pytest.mark.slow
  def test_decode_with_cache_equals_full_forward(self, options):
    # From a one-token and a five-token prompt (the prefill path and the step path both start
    # the cache), one cache capacity (one decode-step compilation); random PE parameters so that
    # zero-initialized tables cannot hide a bug.
    model = _model(**options)
    _randomize_pe_params(model)
    tokens = _tokens(2, 13)
    full = _forward(model, tokens, None, None)
    for prompt in (1, 5):
      cache = model.init_cache(2, 16)
      prefill_logits, cache = _prefill(model, tokens[:, :prompt], cache)
      steps = [prefill_logits]
      for t in range(prompt, 13):
        logits, cache = _decode(model, tokens[:, t:t + 1], jnp.full((2, 1), t, jnp.int32), cache)
        steps.append(logits)
      self.assertEqual(int(cache.length), 13)
      decoded = jnp.concatenate(steps, axis=1)
      if model.pe.length_dependent:  # Frequencies follow the current length: the last step.
        chex.assert_trees_all_close(decoded[:, -1], full[:, -1], atol=1e-4, rtol=1e-4)
      else:
        chex.assert_trees_all_close(decoded, full, atol=2e-5, rtol=2e-5)

  @parameterized.named_parameters(*PE_CASES)
  @pytest.mark.slow
  def test_packed_sequences_equal_separate_sequences(self, options):
    model = _model(**options)
    first, second = _tokens(1, 5, seed=1), _tokens(1, 8, seed=2)
    packed = jnp.concatenate([first, second], axis=1)
    positions = jnp.array([list(range(5)) + list(range(8))], jnp.int32)
    segments = jnp.array([[1] * 5 + [2] * 8], jnp.int32)
    expected = jnp.concatenate(
        [_forward(model, first, None, None), _forward(model, second, None, None)], axis=1)
    forwards = (_forward, _forward_blockwise) if model.pe.supports_blockwise else (_forward,)
    for forward in forwards:
      chex.assert_trees_all_close(forward(model, packed, positions, segments), expected,
                                  atol=2e-5, rtol=2e-5)


class DecoderPropertiesTest(parameterized.TestCase):
  """Model-level claims about what each PE lets the decoder see."""

  @parameterized.named_parameters(*((name, name) for name in PE_NAMES))
  @pytest.mark.slow
  def test_permuting_earlier_tokens(self, pe):
    # One layer: the last token attends to the earlier tokens' embeddings as a set, so without a
    # PE its output cannot depend on their order; every PE must break this symmetry.
    model = _model(pe=pe, num_layers=1)
    _randomize_pe_params(model)
    tokens = _tokens(2, 9)
    permutation = np.array([3, 7, 0, 5, 1, 6, 2, 4])
    permuted = jnp.concatenate([tokens[:, permutation], tokens[:, 8:]], axis=1)
    last = _forward(model, tokens, None, None)[:, -1]
    last_permuted = _forward(model, permuted, None, None)[:, -1]
    if _has_no_hook(model):  # NoPE: nothing tells the earlier tokens apart.
      chex.assert_trees_all_close(last_permuted, last, atol=1e-5)
    else:
      self.assertGreater(float(jnp.max(jnp.abs(last_permuted - last))), 1e-3)

  @parameterized.named_parameters(*((name, name) for name in PE_NAMES))
  @pytest.mark.slow
  def test_shifting_all_positions(self, pe):
    model = _model(pe=pe)
    _randomize_pe_params(model)
    tokens = _tokens(2, 11)
    positions = jnp.tile(jnp.arange(11, dtype=jnp.int32)[None, :], (2, 1))
    logits = _forward(model, tokens, positions, None)
    shifted = _forward(model, tokens, positions + 17, None)
    invariant = all(p.translation_invariant for p in model.layer_pes())
    absolute = any(p.absolute for p in model.layer_pes())
    if invariant:
      chex.assert_trees_all_close(shifted, logits, atol=5e-5, rtol=5e-5)
    elif absolute:
      self.assertGreater(float(jnp.max(jnp.abs(shifted - logits))), 1e-3)
    else:
      self.skipTest(f"pe={pe!r} declares neither absolute nor translation_invariant")


class DecoderVariantsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gelu_untied_mha", dict(mlp="gelu", tie_embeddings=False, num_kv_heads=None)),
      ("swiglu_mqa", dict(num_kv_heads=1)),
  )
  @pytest.mark.slow
  def test_architecture_options(self, options):
    model = _model(pe="alibi", **options)
    tokens = _tokens(2, 13)
    dense = _forward(model, tokens, None, None)
    chex.assert_trees_all_close(_forward_blockwise(model, tokens, None, None), dense, atol=2e-5)
    self.assertEqual(model.lm_head is None, options.get("tie_embeddings", True))

  @parameterized.named_parameters(("rope", "rope"), ("t5", "t5"))
  @pytest.mark.slow
  def test_bfloat16_compute(self, pe):
    model = _model(pe=pe, dtype="bfloat16")
    reference = _model(pe=pe)  # Same seed: same float32 parameters.
    tokens = _tokens(2, 13)
    logits = _forward(model, tokens, None, None)
    chex.assert_type(logits, jnp.float32)
    chex.assert_tree_all_finite(logits)
    self.assertEqual(model.blocks[0].attention.query.kernel[...].dtype, jnp.float32)
    expected = _forward(reference, tokens, None, None)
    np.testing.assert_allclose(logits, expected, atol=0.15 * float(jnp.max(jnp.abs(expected))))
    blockwise = _forward_blockwise(model, tokens, None, None)
    np.testing.assert_allclose(blockwise, logits, atol=0.05 * float(jnp.max(jnp.abs(logits))))

  @pytest.mark.slow
  def test_training_step_with_blockwise_attention_reduces_loss(self):
    import optax  # pylint: disable=g-import-not-at-top
    model = _model(pe="t5", attention="blockwise")
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    tokens = _tokens(4, 13)

    @nnx.jit
    def step(model, optimizer, tokens):
      def loss_fn(model):
        logits = model(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
      loss, grads = nnx.value_and_grad(loss_fn)(model)
      optimizer.update(model, grads)
      return loss

    losses = [float(step(model, optimizer, tokens)) for _ in range(5)]
    self.assertLess(losses[-1], losses[0])
    self.assertTrue(np.all(np.isfinite(losses)))


class DecoderBadInputTest(parameterized.TestCase):

  def test_sequence_longer_than_learned_table(self):
    model = _model(pe=LearnedConfig(max_position=16))
    self.assertEqual(model.pe.max_length, 16)
    with self.assertRaisesRegex(ValueError, r"sequence length 20 .*max_position=16"):
      model(_tokens(1, 20))
    with self.assertRaisesRegex(ValueError, r"sequence length 20 .*max_position=16"):
      _forward(model, _tokens(1, 20), None, None)

  def test_positions_beyond_learned_table(self):
    model = _model(pe=LearnedConfig(max_position=16))
    positions = jnp.arange(4, 12, dtype=jnp.int32)[None, :] * 2  # 8 .. 22; from index 4 >= 16
    with self.assertRaisesRegex(ValueError, "positions"):
      model(_tokens(1, 8), positions=positions)
    # Under jit the positions are traced: the policy is NaN, never a silent clamp (the NaN
    # values reach every row through 0 * NaN in the attention-weighted sum).
    logits = _forward(model, _tokens(1, 8), positions, None)
    self.assertTrue(bool(jnp.all(jnp.isnan(logits[0, -1]))))
    self.assertTrue(bool(jnp.all(jnp.isfinite(_forward(model, _tokens(1, 8), positions - 8,
                                                         None)))))

  def test_malformed_call_arguments(self):
    model = _model(pe="rope")
    with self.assertRaisesRegex(ValueError, "tokens must be an integer array"):
      model(jnp.zeros((1, 4), jnp.float32))
    with self.assertRaisesRegex(ValueError, "tokens must have shape"):
      model(jnp.zeros((4,), jnp.int32))
    with self.assertRaisesRegex(ValueError, r"positions must have shape \[1, 4\]"):
      model(jnp.zeros((1, 4), jnp.int32), positions=jnp.zeros((1, 5), jnp.int32))
    with self.assertRaisesRegex(ValueError, "segment_ids must have shape"):
      model(jnp.zeros((2, 4), jnp.int32), segment_ids=jnp.zeros((1, 4), jnp.int32))
    with self.assertRaisesRegex(ValueError, "attention must be one of"):
      model(jnp.zeros((1, 4), jnp.int32), attention="flash")

  def test_config_type(self):
    with self.assertRaisesRegex(ValueError, "config must be a DecoderConfig"):
      Decoder(dataclasses.asdict(DecoderConfig()), rngs=nnx.Rngs(0))


if __name__ == "__main__":
  absltest.main()
