"""Tests for checkpointable iteration (pejax.data.batch_iterator) on both iterator kinds."""

from __future__ import annotations

import json

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import language_model
from pejax.data import synthetic


_KEYS = ("inputs", "targets", "positions", "loss_mask")


def _tokens(n: int = 5000) -> np.ndarray:
  return np.random.default_rng(123).integers(0, 256, size=n).astype(np.uint8)


def _make(kind: str, seed: int = 0):
  if kind == "language_model":
    return language_model.LanguageModelIterator(_tokens(), batch_size=4, seq_len=32, seed=seed)
  return synthetic.SyntheticTaskIterator(kind, batch_size=4, seq_len=96, seed=seed)


def _assert_batches_equal(a, b):
  assert set(a) == set(b), (set(a), set(b))
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


class IteratorStateTest(parameterized.TestCase):

  @parameterized.parameters("language_model", "copy", "reverse", "passkey", "addition")
  def test_resume_is_exact(self, kind):
    uninterrupted = _make(kind)
    batches = [next(uninterrupted) for _ in range(6)]
    interrupted = _make(kind)
    for _ in range(5):
      next(interrupted)
    state = json.loads(json.dumps(interrupted.get_state()))
    self.assertEqual(state["step"], 5)
    resumed = _make(kind)
    resumed.set_state(state)
    _assert_batches_equal(next(resumed), batches[5])
    self.assertEqual(resumed.get_state()["step"], 6)

  @parameterized.parameters("language_model", "copy", "passkey")
  def test_batches_depend_on_seed_and_step(self, kind):
    first, second = next(_make(kind, seed=0)), next(_make(kind, seed=0))
    _assert_batches_equal(first, second)
    self.assertFalse(np.array_equal(first["inputs"], next(_make(kind, seed=1))["inputs"]))
    iterator = _make(kind, seed=0)
    next(iterator)
    self.assertFalse(np.array_equal(first["inputs"], next(iterator)["inputs"]))
    _assert_batches_equal(_make(kind).batch_at(3), _make(kind).batch_at(3))

  @parameterized.parameters("language_model", "addition")
  def test_batch_layout(self, kind):
    iterator = _make(kind)
    batch = next(iterator)
    self.assertEqual(tuple(sorted(batch)), tuple(sorted(_KEYS)))
    shape = (iterator.batch_size, iterator.seq_len)
    for key in _KEYS:
      self.assertEqual(batch[key].shape, shape, key)
      self.assertEqual(batch[key].dtype, np.float32 if key == "loss_mask" else np.int32, key)
    np.testing.assert_array_equal(batch["positions"],
                                  np.broadcast_to(np.arange(shape[1]), shape))
    self.assertIs(iter(iterator), iterator)

  @parameterized.named_parameters(
      ("seed", "language_model", {"seed": 1}, "seed"),
      ("kind", "language_model", {"kind": "synthetic"}, "kind"),
      ("task", "copy", {"task": "reverse"}, "task"),
      ("batch_size", "copy", {"batch_size": 8}, "batch_size"),
      ("data_size", "language_model", {"num_tokens": 4}, "num_tokens"),
      ("negative_step", "copy", {"step": -1}, "step"))
  def test_set_state_rejects_mismatch(self, kind, change, pattern):
    iterator = _make(kind)
    state = {**iterator.get_state(), **change}
    with self.assertRaisesRegex(ValueError, pattern):
      iterator.set_state(state)
    self.assertEqual(iterator.step, 0)

  def test_set_state_rejects_missing_fields_and_non_dict(self):
    iterator = _make("language_model")
    with self.assertRaisesRegex(ValueError, "missing field.*step"):
      iterator.set_state({k: v for k, v in iterator.get_state().items() if k != "step"})
    with self.assertRaisesRegex(ValueError, "state must be a dict"):
      iterator.set_state([("step", 3)])


if __name__ == "__main__":
  absltest.main()
