"""``pejax.hf.load_tokenizer``, the tokenized corpus and the natural-language passkey task."""

from __future__ import annotations

import pathlib

from absl.testing import absltest
import numpy as np
import pytest

import pejax.data
import pejax.eval
import pejax.hf
import fixture_cases as fx

DIRECTORY = fx.path("llama_default_untied")


class TokenizerTest(absltest.TestCase):

  def test_round_trip_and_special_tokens(self):
    tokenizer = pejax.hf.load_tokenizer(DIRECTORY)
    self.assertEqual(tokenizer.vocab_size, 320)
    self.assertEqual((tokenizer.bos_token_id, tokenizer.eos_token_ids, tokenizer.pad_token_id),
                     (1, (2,), 0))
    text = "def hello():\n    return 42  # the pass key"
    ids = tokenizer.encode(text)
    self.assertEqual(ids.dtype, np.int32)
    self.assertLess(ids.size, len(text.encode()))  # BPE merges: fewer tokens than bytes.
    self.assertEqual(tokenizer.decode(ids), text)
    # The file itself works too.
    self.assertEqual(pejax.hf.load_tokenizer(DIRECTORY / "tokenizer.json").encode(text).tolist(),
                     ids.tolist())

  def test_missing_and_corrupted_files_are_named(self):
    with self.assertRaisesRegex(ValueError, "tokenizer.json not found: .*gemma/tokenizer.json"):
      pejax.hf.load_tokenizer(fx.path("gemma"))
    bad = pathlib.Path(self.create_tempdir().full_path)
    (bad / "tokenizer.json").write_text("{\"model\": 3}")
    with self.assertRaisesRegex(ValueError, "cannot parse tokenizer.json: .*tokenizer.json"):
      pejax.hf.load_tokenizer(bad)


class TokenizedDataTest(absltest.TestCase):

  def test_tokenized_corpus_uses_the_vocabulary(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "text.txt"
    path.write_text("The grass is green. The sky is blue. " * 40)
    tokenizer = pejax.hf.load_tokenizer(DIRECTORY)
    corpus = pejax.data.tokenize_corpus(pejax.data.load_corpus(str(path)), tokenizer)
    self.assertEqual(corpus.train.dtype, np.int32)
    self.assertEqual(corpus.metadata["vocab_size"], 320)
    self.assertEqual(tokenizer.decode(corpus.train), path.read_text()[:len(
        tokenizer.decode(corpus.train))])
    self.assertGreater(corpus.train.max(), 255)  # Merged tokens, not bytes.
    with self.assertRaisesRegex(ValueError, "tokenizer must have encode"):
      pejax.data.tokenize_corpus(corpus, object())

  def test_passkey_prompt_has_the_length_and_scores_the_key(self):
    tokenizer = pejax.hf.load_tokenizer(DIRECTORY)
    example = pejax.data.passkey_text_example(tokenizer, length=300, depth=1.0, seed=3)
    self.assertEqual(example["inputs"].shape, (299,))
    answer = tokenizer.decode(example["targets"][example["loss_mask"] > 0])
    self.assertEqual(answer.strip(), str(int(example["key"])))
    text = tokenizer.decode(np.append(example["inputs"], example["targets"][-1]))
    self.assertTrue(text.endswith(f"The pass key is {int(example['key'])}"))
    self.assertIn(f"The pass key is {int(example['key'])}. Remember it.", text)
    with self.assertRaisesRegex(ValueError, "length must be at least"):
      pejax.data.passkey_text_example(tokenizer, length=50, depth=0.5, seed=0)

  @pytest.mark.slow
  def test_passkey_accuracy_of_a_pretrained_model(self):
    model = fx.load("llama_default_untied")
    tokenizer = pejax.hf.load_tokenizer(DIRECTORY)
    results = pejax.eval.passkey_text_accuracy(model, tokenizer, lengths=[50, 256],
                                               depths=[0.5], examples=2)
    self.assertEqual([r.status for r in results][0][:4], "n/a ")
    self.assertEqual(results[1].examples, 2)
    self.assertEqual(results[1].accuracy, 0.0)  # A random tiny model does not retrieve it.


if __name__ == "__main__":
  absltest.main()
