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


class TokenizerInputsTest(absltest.TestCase):
  """A special token or id that is not in the vocabulary is an error, never dropped."""

  def _copy(self, **files):
    directory = pathlib.Path(self.create_tempdir().full_path)
    (directory / "tokenizer.json").write_bytes((DIRECTORY / "tokenizer.json").read_bytes())
    for name, text in files.items():
      (directory / f"{name}.json").write_text(text)
    return directory

  def test_special_token_not_in_the_vocabulary(self):
    for key in ("eos_token", "bos_token", "pad_token"):
      with self.subTest(key=key):
        directory = self._copy(tokenizer_config=f'{{"{key}": "<nope>"}}')
        with self.assertRaisesRegex(ValueError, rf"tokenizer_config.json {key} '<nope>' is not "
                                    r"a token of .*tokenizer.json"):
          pejax.hf.load_tokenizer(directory)
    directory = self._copy(tokenizer_config='{"eos_token": 7}')
    with self.assertRaisesRegex(ValueError, "eos_token must be a token string"):
      pejax.hf.load_tokenizer(directory)

  def test_ids_in_config_files_must_be_vocabulary_ids(self):
    for name, text, message in (
        ("generation_config", '{"eos_token_id": [2, 999]}',
         r"generation_config.json eos_token_id must be token ids in \[0, 320\), got \[2, 999\]"),
        ("generation_config", '{"eos_token_id": "2"}', r"eos_token_id .*got '2'"),
        ("config", '{"bos_token_id": -1}', r"config.json bos_token_id .*got -1"),
        ("config", '{"pad_token_id": 1.5}', r"config.json pad_token_id .*got 1.5"),
        ("config", '{"eos_token_id": true}', r"config.json eos_token_id .*got True"),
    ):
      with self.subTest(text=text):
        with self.assertRaisesRegex(ValueError, message):
          pejax.hf.load_tokenizer(self._copy(**{name: text}))
    # A list of valid stop ids is kept whole.
    tokenizer = pejax.hf.load_tokenizer(self._copy(generation_config='{"eos_token_id": [2, 5]}'))
    self.assertEqual(tokenizer.eos_token_ids, (2, 5))

  def test_decode_refuses_ids_outside_the_vocabulary_and_non_integers(self):
    tokenizer = pejax.hf.load_tokenizer(DIRECTORY)
    with self.assertRaisesRegex(ValueError, r"ids must be in \[0, 320\) .*got 320"):
      tokenizer.decode([5, 320])
    with self.assertRaisesRegex(ValueError, r"got -1"):
      tokenizer.decode(np.array([-1, 3]))
    with self.assertRaisesRegex(ValueError, "ids must be integer token ids, got dtype float"):
      tokenizer.decode(np.array([2.5]))
    with self.assertRaisesRegex(ValueError, "got dtype bool"):
      tokenizer.decode([True])
    self.assertEqual(tokenizer.decode([]), "")


# Non-ASCII (2-, 3- and 4-byte UTF-8), control bytes (\x00 is the synthetic tasks' padding
# id), leading and repeated spaces, CRLF.
TEXTS = ("plain ascii", "héllo wörld", "日本語のテキスト", "emoji 🙂👍🏽", "\x00\x01\x7f\t\n",
         "  two  spaces ", "a\r\nb", "")


class ByteTokenizerTest(absltest.TestCase):

  def test_ids_are_the_utf8_bytes(self):
    tokenizer = pejax.hf.ByteTokenizer()
    self.assertEqual(tokenizer.encode("héllo"), [104, 195, 169, 108, 108, 111])  # Golden.
    self.assertEqual(tokenizer.encode("🙂"), [240, 159, 153, 130])
    self.assertEqual(tokenizer.vocab_size, 256)
    self.assertEqual((tokenizer.bos_token_id, tokenizer.eos_token_ids, tokenizer.pad_token_id),
                     (None, (), None))
    for text in TEXTS:
      self.assertEqual(tokenizer.decode(tokenizer.encode(text)), text)
    self.assertEqual(tokenizer.decode(np.asarray([104, 105], np.int32)), "hi")
    self.assertEqual(tokenizer.decode([0xff]), "\ufffd")  # Invalid UTF-8: replaced, not lost.

  def test_bad_input_is_named(self):
    tokenizer = pejax.hf.ByteTokenizer()
    with self.assertRaisesRegex(ValueError, "ids must be bytes in \\[0, 256\\), got 256"):
      tokenizer.decode([1, 256])
    with self.assertRaisesRegex(ValueError, "ids must be bytes .* got -1"):
      tokenizer.decode([-1])
    with self.assertRaisesRegex(ValueError, "text must be a str, got bytes"):
      tokenizer.encode(b"abc")

  def test_stand_in_characters_are_the_byte_level_alphabet(self):
    from tokenizers import pre_tokenizers
    table = pejax.hf.tokenizer.byte_to_unicode()
    self.assertEqual(sorted(table), list(range(256)))
    self.assertEqual(sorted(table.values()), sorted(pre_tokenizers.ByteLevel.alphabet()))
    self.assertEqual((table[ord("A")], table[32], table[0]), ("A", "Ġ", "Ā"))  # GPT-2's map.

  def test_saved_tokenizer_json_gives_the_same_ids(self):
    directory = pathlib.Path(self.create_tempdir().full_path)
    tokenizer = pejax.hf.ByteTokenizer()
    self.assertEqual(tokenizer.save(directory), ["tokenizer.json", "tokenizer_config.json"])
    loaded = pejax.hf.load_tokenizer(directory)
    self.assertEqual(loaded.vocab_size, 256)
    self.assertEqual((loaded.bos_token_id, loaded.eos_token_ids, loaded.pad_token_id),
                     (None, (), None))
    every_byte = bytes(range(128)).decode("ascii") + "".join(map(chr, range(128, 2048, 7)))
    for text in TEXTS + (every_byte,):
      ids = tokenizer.encode(text)
      self.assertEqual(loaded.encode(text).tolist(), ids, text)
      self.assertEqual(loaded.encode(text, add_special_tokens=True).tolist(), ids, text)
      self.assertEqual(loaded.decode(ids), text)
    # Every id is its byte: the 256 single-byte strings are the whole vocabulary.
    from tokenizers import Tokenizer
    raw = Tokenizer.from_file(str(directory / "tokenizer.json"))
    table = pejax.hf.tokenizer.byte_to_unicode()
    self.assertEqual(raw.get_vocab(), {table[b]: b for b in range(256)})


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
