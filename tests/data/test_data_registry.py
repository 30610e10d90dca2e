"""Tests for data names: corpora, tasks, make_train_iterator (pejax.data.registry)."""

from __future__ import annotations

import os

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax import experiment_config
from pejax.data import language_model
from pejax.data import registry
from pejax.data import synthetic


def _assert_batches_equal(a, b):
  assert set(a) == set(b), (set(a), set(b))
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


class RegistryTest(parameterized.TestCase):

  def _config(self, name: str):
    config = experiment_config.get_default_config()
    config.data.name = name
    config.data.train_len = 32
    config.data.batch_size = 3
    config.seed = 7
    return config

  def test_text_directory_by_path(self):
    root = self.create_tempdir()
    for i in range(30):
      root.create_file(f"d{i}.txt", content=f"line {i} " * 20)
    config = self._config(root.full_path)
    iterator = registry.make_train_iterator(config)
    self.assertIsInstance(iterator, language_model.LanguageModelIterator)
    corpus = registry.load_corpus(root.full_path)
    np.testing.assert_array_equal(iterator.tokens, corpus.train)
    self.assertEqual(iterator.get_state()["seed"], 7)
    _assert_batches_equal(next(iterator), next(registry.make_train_iterator(config, corpus=corpus)))

  def test_default_config_trains_on_stdlib(self):
    config = experiment_config.get_default_config()
    corpus = registry.load_corpus("stdlib")
    iterator = registry.make_train_iterator(config, corpus=corpus)
    self.assertIsInstance(iterator, language_model.LanguageModelIterator)
    self.assertEqual(iterator.get_state()["num_tokens"], corpus.train.size)
    batch = next(iterator)
    self.assertEqual(batch["inputs"].shape, (config.data.batch_size, config.data.train_len))

  def test_corpus_of_another_name_is_rejected(self):
    path = self.create_tempfile("a.txt", content="some text " * 50).full_path
    corpus = registry.load_corpus(path)
    with self.assertRaisesRegex(ValueError, "config.data.name"):
      registry.make_train_iterator(self._config(path + "x"), corpus=corpus)

  @parameterized.parameters(*synthetic.TASK_NAMES)
  def test_task_names_make_synthetic_iterators(self, task):
    config = self._config(task)
    config.data.train_len = 128
    iterator = registry.make_train_iterator(config)
    self.assertIsInstance(iterator, synthetic.SyntheticTaskIterator)
    self.assertEqual((iterator.task, iterator.seq_len, iterator.batch_size), (task, 128, 3))
    self.assertEqual(iterator.max_size, synthetic.max_size_for(task, 128))
    with self.assertRaisesRegex(ValueError, "synthetic task"):
      registry.load_corpus(task)

  def test_optional_task_fields(self):
    config = self._config("addition")
    config.data.train_len = 64
    config.data.task_min_size = 2
    config.data.task_max_size = 5
    config.data.reverse_digits = True
    iterator = registry.make_train_iterator(config)
    self.assertEqual((iterator.min_size, iterator.max_size), (2, 5))
    self.assertEqual(iterator.options, {"reverse_digits": True})

  @parameterized.named_parameters(("unknown", "wikitext-103"), ("empty", ""),
                                  ("missing_path", "/nonexistent/dir/corpus.txt"))
  def test_unknown_names_list_the_valid_ones(self, name):
    with self.assertRaisesRegex(ValueError, r"'stdlib'.*'copy'.*existing file or directory"):
      registry.load_corpus(name)
    with self.assertRaisesRegex(ValueError, r"'stdlib'.*'copy'.*existing file or directory"):
      registry.make_train_iterator(self._config(name))

  def test_builtin_name_wins_over_a_path(self):
    cwd = os.getcwd()
    tmp = self.create_tempdir()
    tmp.create_file("copy", content="not a task " * 30)
    os.chdir(tmp.full_path)
    try:
      self.assertIsInstance(registry.make_train_iterator(self._config("copy")),
                            synthetic.SyntheticTaskIterator)
      corpus = registry.load_corpus("./copy")
    finally:
      os.chdir(cwd)
    self.assertEqual(corpus.train.tobytes() + corpus.valid.tobytes(), b"not a task " * 30)


if __name__ == "__main__":
  absltest.main()
