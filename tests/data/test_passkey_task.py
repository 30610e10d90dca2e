"""Tests for the passkey-retrieval task (pejax.data.passkey)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import passkey


class PasskeyTest(parameterized.TestCase):

  def test_min_length_golden(self):
    # len("The pass key is 12345. Remember it. ") + len("What is the pass key? The pass key is ")
    # + 5 digits + len(".") = 36 + 38 + 5 + 1.
    self.assertEqual(passkey.passkey_min_length(5), 80)

  @parameterized.product(length=(80, 81, 200, 1000, 4097), depth=(0.0, 0.1, 0.5, 0.77, 1.0))
  def test_key_at_requested_depth(self, length, depth):
    example = passkey.passkey_example(np.random.default_rng(length), length=length, depth=depth)
    text, key = example.text, example.answer
    self.assertLen(text, length)
    self.assertLen(key, 5)
    self.assertEqual(int(key), example.info["key"])
    self.assertTrue(example.prompt.endswith(passkey.QUESTION))
    self.assertEqual(example.suffix, b".")
    sentence = passkey.key_sentence(key)
    offset = text.find(sentence)
    self.assertEqual(offset, example.info["key_offset"])
    self.assertEqual(text.count(sentence), 1)
    # The key sits at a sentence boundary, at most one filler sentence from depth * filler bytes.
    filler = length - passkey.passkey_min_length(5)
    max_sentence = max(len(s) for s in passkey.FILLER_SENTENCES)
    self.assertLessEqual(abs(offset - depth * filler), max_sentence)
    self.assertEqual(passkey.solve_passkey(example.prompt), key)

  def test_depth_orders_the_key_position(self):
    offsets = [passkey.passkey_example(0, length=2000, depth=d).info["key_offset"]
               for d in (0.0, 0.25, 0.5, 0.75, 1.0)]
    self.assertEqual(offsets, sorted(offsets))
    self.assertEqual(offsets[0], 0)
    self.assertGreater(offsets[-1], 2000 - 80 - 25)

  def test_filler_is_whole_sentences(self):
    example = passkey.passkey_example(0, length=500, depth=0.5)
    filler = example.prompt.replace(passkey.key_sentence(example.answer), b"")
    filler = filler[:-len(passkey.QUESTION)].rstrip(b" ") + b" "
    cycle = b"".join(passkey.FILLER_SENTENCES) * 10
    self.assertTrue(cycle.startswith(filler))

  @parameterized.named_parameters(
      ("too_short", dict(length=79, depth=0.5), "length"),
      ("depth_above_one", dict(length=200, depth=1.5), "depth"),
      ("depth_nan", dict(length=200, depth=float("nan")), "depth"))
  def test_bad_arguments(self, kwargs, pattern):
    with self.assertRaisesRegex(ValueError, pattern):
      passkey.passkey_example(0, **kwargs)


if __name__ == "__main__":
  absltest.main()
