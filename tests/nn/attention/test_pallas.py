"""The Pallas flash-attention kernels (interpret mode) against pejax's dense attention.

Claims: for every PE whose bias the kernel computes in-kernel (ALiBi, T5, KERPLE log / power,
Sandwich, FIRE) and without a bias, the kernel's output and its gradients with respect to q, k,
v and the PE's own parameters equal those of ``pejax.nn.attention.attention(implementation=
"dense")`` with the PE's ``bias`` hook, under causal masks, sliding windows, segment ids
(packing), GQA, per-row randomized positions and lengths that are not a multiple of the tile;
the TPU variant of the kernels (parameters in scalar memory) gives the same numbers; and the
kernel refuses what it does not serve with a ``ValueError`` naming the argument.

Interpret mode is slow (a few seconds per compiled case): tiny shapes, one jitted function per
case computing the output and every gradient; the fast tier keeps three cases and the error
checks, the other PEs and mask combinations are ``slow``.
"""

from __future__ import annotations

import dataclasses
import importlib

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.nn.attention import attention
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.attention.pallas import pallas_attention, pallas_can_serve
from pejax.nn.positional.registry import build_pe, pe_config, pe_names
from pejax import encodings as tile_bias
from pejax.encodings.kernel_bias import KernelBias

B, L, H, K, D = 2, 24, 2, 1, 8   # L = 24: two 16-row tiles, the second padded.
BLOCK = 16


def _pe(name: str, **fields):
  model = DecoderConfig(num_layers=1, d_model=H * D, num_heads=H, num_kv_heads=K, pe=name)
  return build_pe(pe_config(name, **fields), model, rngs=nnx.Rngs(3))


def _inputs(seed: int = 0, *, length: int = L):
  keys = jax.random.split(jax.random.PRNGKey(seed), 5)
  q = jax.random.normal(keys[0], (B, length, H, D), jnp.float32)
  k = jax.random.normal(keys[1], (B, length, K, D), jnp.float32)
  v = jax.random.normal(keys[2], (B, length, K, D), jnp.float32)
  cotangent = jax.random.normal(keys[3], (B, length, H, D), jnp.float32)
  # Per-row sorted distinct positions up to 2000: every T5 bucket direction, log buckets and
  # saturation, FIRE past its threshold (512).
  rows = [np.sort(np.random.default_rng(seed + r).choice(2000, length, replace=False))
          for r in range(B)]
  positions = jnp.asarray(np.stack(rows), jnp.int32)
  return q, k, v, cotangent, positions


def _segments(length: int = L):
  # Row 0: one document; row 1: three packed documents.
  second = np.repeat([0, 1, 2], [7, 10, length - 17])
  return jnp.asarray(np.stack([np.zeros(length, int), second]), jnp.int32)


def _compare(pe_name, *, window=None, segments=False, causal=True, backend=None, tol=2e-5,
             length=L, **pe_fields):
  """Output and all gradients of the kernel vs dense attention; returns nothing, asserts."""
  q, k, v, cotangent, positions = _inputs(length=length)
  seg = _segments(length) if segments else None
  pe = _pe(pe_name, **pe_fields) if pe_name is not None else None
  graphdef, state = nnx.split(pe) if pe is not None else (None, None)
  common = dict(q_positions=positions, k_positions=positions, causal=causal, window=window,
                q_segment_ids=seg, k_segment_ids=seg)

  def reference(q, k, v, state):
    bias = None
    if pe is not None and pe.has_bias:
      module = nnx.merge(graphdef, state)
      bias = module.bias
    out = attention(q, k, v, bias=bias, implementation="dense", **common)
    return jnp.sum(out * cotangent), out

  def kernel(q, k, v, state):
    bias = nnx.merge(graphdef, state).kernel_bias() if pe is not None else None
    out = pallas_attention(q, k, v, bias=bias, block_q=BLOCK, block_k=BLOCK, interpret=True,
                           backend=backend, **common)
    return jnp.sum(out * cotangent), out

  results = []
  for fn in (reference, kernel):
    grad_fn = jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2, 3), has_aux=True))
    (_, out), grads = grad_fn(q, k, v, state)
    results.append((out, grads))
  (ref_out, ref_grads), (out, grads) = results
  np.testing.assert_allclose(out, ref_out, atol=tol, rtol=tol, err_msg="output")
  for name, got, want in zip(("dq", "dk", "dv"), grads[:3], ref_grads[:3]):
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol, err_msg=name)
  if state is not None:
    ref_leaves = jax.tree.leaves_with_path(ref_grads[3])
    leaves = jax.tree.leaves(grads[3])
    assert len(leaves) == len(ref_leaves)
    for (path, want), got in zip(ref_leaves, leaves):
      np.testing.assert_allclose(got, want, atol=tol, rtol=1e-4,
                                 err_msg=f"gradient of {jax.tree_util.keystr(path)}")
    learnable = [x for x in jax.tree.leaves(ref_grads[3]) if np.any(np.asarray(x) != 0)]
    if pe_name in ("t5", "kerple_log", "kerple_power", "fire"):
      assert learnable, "the claim needs a non-zero reference gradient of the PE's parameters"


# Fast tier: three cases covering no bias + GQA + padding, a learned table with packing, and a
# sliding window with a closed-form bias. -------------------------------------------------------


def test_no_bias_causal_gqa_padded_length_matches_dense():
  _compare(None)


def test_t5_with_segment_ids_matches_dense_values_and_table_gradient():
  _compare("t5", segments=True)


def test_alibi_sliding_window_matches_dense():
  _compare("alibi", window=5)


# Every PE the kernel serves, and the mask combinations (slow). --------------------------------

SERVED = ("alibi", "t5", "kerple_log", "kerple_power", "sandwich", "fire")


@pytest.mark.parametrize("name", SERVED)
@pytest.mark.slow
def test_every_served_pe_matches_dense_values_and_gradients(name):
  _compare(name, segments=True)


@pytest.mark.parametrize("name", ("t5", "kerple_power"))
@pytest.mark.slow
def test_learned_biases_with_sliding_window(name):
  _compare(name, window=6)


@pytest.mark.slow
def test_bidirectional_t5_without_causal_mask():
  _compare("t5", causal=False, bidirectional=True)


@pytest.mark.slow
def test_tpu_variant_parameters_in_scalar_memory_same_numbers():
  _compare("kerple_log", segments=True, backend="mosaic_tpu")


@pytest.mark.slow
def test_length_of_one_tile_exactly():
  _compare("alibi", length=16)


@pytest.mark.parametrize("window", (None, 5))
@pytest.mark.slow
def test_query_offset_chunked_prefill_matches_dense(window):
  # 12 queries at slots 12..23 against 24 keys (a prefill continuing a cache): the causal and
  # window tile bounds shift with the offset.
  q, k, v, cotangent, positions = _inputs()
  spec = _pe("alibi").kernel_bias()
  common = dict(q_positions=positions[:, 12:], k_positions=positions, window=window,
                q_offset=12)

  def kernel(q, k, v):
    out = pallas_attention(q, k, v, bias=spec, block_q=BLOCK, block_k=BLOCK, interpret=True,
                           **common)
    return jnp.sum(out * cotangent[:, 12:])

  def reference(q, k, v):
    out = attention(q, k, v, bias=_pe("alibi").bias, implementation="dense", **common)
    return jnp.sum(out * cotangent[:, 12:])

  for name, got, want in zip(
      ("loss", "dq", "dk", "dv"),
      jax.tree.leaves(jax.jit(jax.value_and_grad(kernel, argnums=(0, 1, 2)))(q[:, 12:], k, v)),
      jax.tree.leaves(jax.jit(jax.value_and_grad(reference, argnums=(0, 1, 2)))(q[:, 12:], k,
                                                                               v))):
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5, err_msg=name)


# The tile functions alone against the PEs' own bias hooks (cheap: no kernel). -----------------


@pytest.mark.parametrize("name", SERVED)
def test_tile_function_equals_pe_bias_hook(name):
  pe = _pe(name)
  positions = _inputs()[4][:1]
  spec = pe.kernel_bias()
  want = np.asarray(pe.bias(positions, positions))[0]  # [H, L, L]
  qf = positions[0].astype(jnp.float32)[:, None]
  kf = positions[0].astype(jnp.float32)[None, :]
  for head in range(H):
    params = tuple(spec.params[head, j] for j in range(spec.tile.num_params))
    np.testing.assert_allclose(spec.tile(params, qf, kf), want[head], atol=1e-5, rtol=1e-5,
                               err_msg=f"head {head}")


def test_servable_pes_are_exactly_those_with_a_position_bias_or_none():
  model = DecoderConfig(num_layers=1, d_model=H * D, num_heads=H, num_kv_heads=K)
  for name in pe_names():
    pe = build_pe(pe_config(name), model, rngs=nnx.Rngs(0))
    reason = pallas_can_serve(pe=pe)
    if pe.has_content_bias or pe.has_logits or pe.has_attend:
      assert reason is not None and name in reason
      assert not pe.has_kernel_bias and pe.kernel_bias() is None, name
    elif pe.has_bias:
      assert reason is None, name
      assert pe.has_kernel_bias and isinstance(pe.kernel_bias(), KernelBias), name
      assert name in SERVED
    else:
      assert reason is None and pe.kernel_bias() is None, name


def test_can_serve_refuses_cache_decoding_and_hooks():
  assert "q_offset" in pallas_can_serve(q_offset=jnp.int32(3))
  assert "kv_length" in pallas_can_serve(kv_length=5)
  assert "logit" in pallas_can_serve(logits_fn=lambda x: x)
  assert "features" in pallas_can_serve(features=True)
  assert pallas_can_serve(q_offset=4) is None


# Failure modes: ValueError naming the argument (no kernel runs). -------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_q=24), "block_q must be a power of two"),
    (dict(block_k=8), "block_k must be a power of two"),
    (dict(window=0), "window"),
    (dict(q_offset=-1), "q_offset"),
    (dict(q_offset=jnp.int32(2)), "q_offset"),
    (dict(backend="cuda"), "backend"),
    (dict(q_positions=jnp.zeros((1, L), jnp.float32)), "q_positions"),
    (dict(k_positions=jnp.zeros((3, L), jnp.int32)), "k_positions"),
    (dict(q_segment_ids=jnp.zeros((B, L), jnp.int32)), "given together"),
    (dict(bias=lambda a, b: a), "bias must be a KernelBias"),
    (dict(bias=tile_bias.alibi_kernel_bias(H + 1)), r"bias.params must have shape \[H=2"),
    (dict(scale=0.0), "scale"),
])
def test_bad_arguments_raise_naming_them(kwargs, match):
  q, k, v, _, positions = _inputs()
  args = dict(q_positions=positions, k_positions=positions, interpret=True)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    pallas_attention(q, k, v, **args)


def test_bad_shapes_raise():
  q, k, v, _, positions = _inputs()
  with pytest.raises(ValueError, match="multiple of key/value heads"):
    pallas_attention(q[:, :, :1], jnp.concatenate([k, k], 2), jnp.concatenate([v, v], 2),
                     q_positions=positions, k_positions=positions, interpret=True)
  with pytest.raises(ValueError, match=r"q must be \[B, Lq, H, D\]"):
    pallas_attention(q[0], k, v, q_positions=positions, k_positions=positions, interpret=True)


def test_bad_bias_settings_raise_naming_them():
  with pytest.raises(ValueError, match="num_buckets"):
    tile_bias.t5_kernel_bias(jnp.zeros((8, H)), num_buckets=3, max_distance=16,
                             bidirectional=True)
  with pytest.raises(ValueError, match="table must have shape"):
    tile_bias.t5_kernel_bias(jnp.zeros((8, H)), num_buckets=16, max_distance=64,
                             bidirectional=False)
  with pytest.raises(ValueError, match="kind"):
    tile_bias.kerple_kernel_bias(jnp.ones(H), jnp.ones(H), kind="cubic")
  with pytest.raises(ValueError, match="dim"):
    tile_bias.sandwich_kernel_bias(H, dim=7)
  with pytest.raises(ValueError, match="FIRE parameters"):
    tile_bias.fire_kernel_bias(jnp.ones(4), jnp.ones(3), jnp.ones((4, H)), jnp.ones(H),
                               0.1, 512.0, eps=1e-6)


# The whole decoder with its attention routed to the kernel (the benchmark's stand-in for the
# dispatch): loss and every parameter gradient equal the dense decoder's. -----------------------


@pytest.mark.parametrize("name", ("t5", "kerple_log"))
@pytest.mark.slow
def test_decoder_routed_to_the_kernel_matches_dense_loss_and_gradients(name, monkeypatch):
  from benchmarks.accelerator import routed_attention  # pylint: disable=g-import-not-at-top
  from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
  kernel_module = importlib.import_module("pejax.nn.attention.pallas")

  calls = []
  original = kernel_module.pallas_attention
  monkeypatch.setattr(kernel_module, "pallas_attention",
                      lambda *a, **kw: calls.append(kw["bias"]) or original(*a, **kw))

  config = DecoderConfig(num_layers=2, d_model=H * D, num_heads=H, num_kv_heads=K, pe=name)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (B, L), 0, 256, jnp.int32)
  positions = _inputs()[4]
  segments = _segments()

  def loss(model):
    logits = model(tokens, positions=positions, segment_ids=segments)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

  results = []
  for route in ("pejax-dense", "pallas"):
    with routed_attention(route, interpret=True) as implementation:
      model = Decoder(dataclasses.replace(config, attention=implementation), rngs=nnx.Rngs(0))
      results.append(nnx.jit(nnx.value_and_grad(loss))(model))
  (ref_loss, ref_grads), (got_loss, got_grads) = results
  assert len(calls) == 2 and all(bias.tile.name.startswith(name) for bias in calls)  # 2 layers
  np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-5)
  for (path, want), got in zip(jax.tree.leaves_with_path(ref_grads), jax.tree.leaves(got_grads)):
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))
