"""A PE from outside the package with an in-kernel bias, served by a kernel registered from outside.

Two extension points, used as a contributor would (CONTRIBUTING.md's PE and kernel recipes):

* ``user_kernel_bias_pe.py`` (this directory) is a whole PE in one file, with a ``kernel_bias()``
  hook; no pejax file names it.
* The Pallas kernel, registered for the CPU in interpret mode (a ``Kernel`` built from the
  built-in ``pallas.KERNEL`` with another ``run``), takes precedence on this platform; the
  decoder then hands attention the PE's bias function together with its kernel bias.

The claims: the kernel serves every layer of the decoder for that PE (the tile function it
receives is the user's), and the loss and every parameter gradient (the user PE's slopes
included) equal those of the decoder on the built-in dense path.
"""

import dataclasses
import importlib
import sys

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.nn import Decoder, DecoderConfig, pe_names
from pejax.nn import attention as attention_lib
from pejax.nn.attention import pallas
from pejax.nn.positional import interface

USER_MODULE = "tests.nn.attention.user_kernel_bias_pe"

B, L, VOCAB = 2, 24, 32


def _interpret_kernel(calls: list) -> attention_lib.Kernel:
  """The built-in Pallas kernel, run in Pallas's interpreter on the CPU (a test stand-in)."""

  def run(call: attention_lib.AttentionCall) -> jax.Array:
    calls.append(None if call.kernel_bias is None else call.kernel_bias.tile.function)
    return pallas.pallas_attention(
        call.q, call.k, call.v, q_positions=call.q_positions, k_positions=call.k_positions,
        bias=call.kernel_bias if call.bias is not None else None, causal=call.causal,
        window=call.window, q_segment_ids=call.q_segment_ids,
        k_segment_ids=call.k_segment_ids, q_offset=call.q_offset, block_q=16, block_k=16,
        interpret=True)

  return dataclasses.replace(pallas.KERNEL, name="pallas_interpret", run=run,
                             platforms=frozenset({"cpu"}), priority=250)


def _loss_and_grads(pe: str):
  config = DecoderConfig(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=2, pe=pe,
                         attention="dense")
  model = Decoder(config, rngs=nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (B, L), 0, VOCAB)
  graphdef, state = nnx.split(model)

  def loss(state):
    logits = nnx.merge(graphdef, state)(tokens[:, :-1])
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1))

  return jax.value_and_grad(loss)(state)


@pytest.fixture(name="user_pe")
def _user_pe():
  """The user's module, imported (its PE registers itself) and unregistered afterwards."""
  # Imported as any user module (from the repository root, which pytest puts on sys.path);
  # run afresh, so that it registers again after an earlier test's clean-up.
  sys.modules.pop(USER_MODULE, None)
  module = importlib.import_module(USER_MODULE)
  yield module
  interface._REGISTRY.pop("log_distance_user", None)  # pylint: disable=protected-access


@pytest.mark.slow
def test_registered_kernel_serves_the_user_pe_and_matches_dense(user_pe):
  assert "log_distance_user" in pe_names()
  assert not attention_lib.kernel_bias_served("cpu")  # The built-in table: no CPU kernel does.
  want_loss, want_grads = _loss_and_grads("log_distance_user")

  calls = []
  attention_lib.register_kernel(_interpret_kernel(calls))
  try:
    assert attention_lib.kernel_bias_served("cpu")
    got_loss, got_grads = _loss_and_grads("log_distance_user")
  finally:
    attention_lib.unregister_kernel("pallas_interpret")

  # Traced once per layer, each time with the user's tile function.
  assert calls and all(fn is user_pe.log_distance_tile for fn in calls), calls
  np.testing.assert_allclose(got_loss, want_loss, rtol=2e-5, atol=2e-5)
  want_leaves = jax.tree.leaves_with_path(want_grads)
  got_leaves = jax.tree.leaves(got_grads)
  assert len(want_leaves) == len(got_leaves)
  slopes_seen = False
  for (path, want), got in zip(want_leaves, got_leaves):
    slopes_seen |= "slopes" in jax.tree_util.keystr(path)
    np.testing.assert_allclose(got, want, rtol=5e-4, atol=5e-5,
                               err_msg=jax.tree_util.keystr(path))
  assert slopes_seen  # The user PE's own parameter got its gradient through the kernel.


def test_a_pe_without_kernel_bias_is_not_handed_to_the_kernel():
  """A bias function alone (no kernel bias) never reaches a kernel that computes biases inside."""
  calls = []
  kernel = attention_lib.register_kernel(_interpret_kernel(calls))
  try:
    q = jnp.ones((1, 8, 2, 8), jnp.float32)
    positions = jnp.arange(8, dtype=jnp.int32)[None]
    call = attention_lib.AttentionCall(
        q=q, k=q, v=q, q_positions=positions, k_positions=positions,
        bias=lambda qp, kp: jnp.zeros((1, 2, 8, 8)), kernel_bias=None, bias_grad=True,
        schedule="dense", causal=True, q_offset=0, kv_length=None, q_segment_ids=None,
        k_segment_ids=None, block_size=8, window=None, q_features=None, k_features=None,
        logits_fn=None, platform="cpu")
    assert attention_lib.select_kernel(call) == "dense"
    assert attention_lib.select_kernel(call._replace(bias=None)) == kernel.name
  finally:
    attention_lib.unregister_kernel(kernel.name)
  assert not calls


def test_kernel_registry_names_bad_input():
  with pytest.raises(ValueError, match="already registered"):
    attention_lib.register_kernel(pallas.KERNEL)
  with pytest.raises(ValueError, match="no attention kernel named 'nope'"):
    attention_lib.unregister_kernel("nope")
  with pytest.raises(ValueError, match="kernel must be"):
    attention_lib.register_kernel("dense")
  with pytest.raises(ValueError, match="serves must be callable"):
    attention_lib.Kernel("x", serves=None, run=lambda call: call.q)
  with pytest.raises(ValueError, match="priority must be an int"):
    attention_lib.Kernel("x", serves=bool, run=bool, priority=1.5)
  names = [kernel.name for kernel in attention_lib.kernels()]
  assert names == ["cudnn", "pallas", "logit_hook", "blockwise", "dense"], names
