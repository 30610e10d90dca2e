"""pejax.eval.ruler: RULER task generators fit their token budget, put their answers in the
prompt as the task defines, are reproducible by seed, and score like RULER's string matchers."""

import collections
import json
import re

from absl.testing import absltest
from absl.testing import parameterized

from pejax.eval import ruler
from pejax.eval.ruler import frequent_words
from pejax.eval.ruler import length_fit
from pejax.eval.ruler import vocabulary

BYTES = ruler.ByteTokenizer()
ALL_TASKS = ruler.task_names()
NIAH_TASKS = tuple(name for name in ALL_TASKS if name.startswith("niah"))
NEEDLE = re.compile(r"One of the special magic (\w+) for (\S+) is: (\S+)\.")
VT_LINE = re.compile(r"^VAR ([A-Z]+) = (?:(\d+)|VAR ([A-Z]+))$", re.MULTILINE)


def _generate(task, length=3000, **kwargs):
  kwargs.setdefault("num_examples", 1)
  kwargs.setdefault("seed", 0)
  return ruler.generate(task, length=length, tokenizer=BYTES, **kwargs)


def _resolve_chains(text):
  """Independent resolver: variable -> the number it ends up holding, from VAR lines."""
  assigned = {}
  for name, number, source in VT_LINE.findall(text):
    assigned[name] = int(number) if number else source
  values = {}
  for name in assigned:
    seen, current = set(), name
    while isinstance(assigned.get(current), str) and current not in seen:
      seen.add(current)
      current = assigned[current]
    values[name] = assigned.get(current)
  return values


class WordTokenizer:
  """A non-byte tokenizer: one token per whitespace-separated word (counts are not additive)."""

  def encode(self, text):
    return text.split()


class BosTokenizer:
  """Adds a BOS token unless told not to, like transformers' tokenizers."""

  def encode(self, text, add_special_tokens=True):
    return [1] * add_special_tokens + list(text.encode("utf-8"))


class TaskRegistryTest(absltest.TestCase):

  def test_eleven_tasks_with_ruler_metrics_and_budgets(self):
    self.assertEqual(ALL_TASKS, tuple(ruler.TASKS))
    self.assertLen(ALL_TASKS, 11)
    self.assertContainsSubset({"niah_single_1", "niah_multikey_2", "niah_multikey_3", "vt",
                               "cwe", "fwe"}, ALL_TASKS)
    budgets = {name: spec.tokens_to_generate for name, spec in ruler.TASKS.items()}
    self.assertEqual((budgets["niah_single_1"], budgets["vt"], budgets["cwe"], budgets["fwe"]),
                     (128, 30, 120, 50))
    self.assertTrue(all(spec.metric == "all" for spec in ruler.TASKS.values()))

  def test_vocabulary_is_distinct_and_substring_free(self):
    words = vocabulary.single_words()
    self.assertGreater(len(words), 500)
    self.assertLen(set(words), len(words))
    self.assertTrue(all(w.isalpha() and w.islower() for w in words))
    clashes = [(a, b) for a in words for b in words if a != b and a in b]
    self.assertEqual(clashes, [])


class EveryTaskTest(parameterized.TestCase):

  @parameterized.parameters(*ALL_TASKS)
  def test_prompt_fits_the_budget_closely_and_ends_with_the_answer_prefix(self, task):
    for length in (3000, 12000):
      for example in _generate(task, length=length, num_examples=2):
        self.assertEqual(example.length_tokens, len(BYTES.encode(example.input)))
        self.assertLessEqual(example.length_tokens, length)
        self.assertGreaterEqual(example.length_tokens, 0.95 * length)
        self.assertTrue(example.input.endswith(example.answer_prefix))
        self.assertEqual((example.task, example.length), (task, length))
        json.dumps(example.to_json())

  @parameterized.parameters(*ALL_TASKS)
  def test_same_seed_same_examples_other_seed_other_examples(self, task):
    first = _generate(task, num_examples=3, seed=7)
    self.assertEqual(first, _generate(task, num_examples=3, seed=7))
    self.assertEqual(first[2], _generate(task, num_examples=1, seed=7, first_index=2)[0])
    self.assertNotEqual(first[0].input, first[1].input)
    self.assertNotEqual(first[0].input, _generate(task, num_examples=1, seed=8)[0].input)

  @parameterized.parameters(*ALL_TASKS)
  def test_length_below_the_minimum_names_the_minimum_which_then_works(self, task):
    with self.assertRaisesRegex(ValueError, r"length must be at least (\d+)") as caught:
      _generate(task, length=200)
    minimum = int(re.search(r"at least (\d+)", str(caught.exception)).group(1))
    self.assertLessEqual(_generate(task, length=minimum)[0].length_tokens, minimum)

  @parameterized.parameters(*ALL_TASKS)
  def test_non_additive_tokenizer_still_fits(self, task):
    tokenizer = WordTokenizer()
    example = ruler.generate(task, length=2000, tokenizer=tokenizer, num_examples=1, seed=0)[0]
    self.assertEqual(example.length_tokens, len(tokenizer.encode(example.input)))
    self.assertBetween(example.length_tokens, 1800, 2000)


class NiahTest(parameterized.TestCase):

  @parameterized.parameters(*NIAH_TASKS)
  def test_needles_and_answers_appear_as_intended(self, task):
    options = ruler.TASKS[task].default_options
    example = _generate(task, length=6000)[0]
    needles = NEEDLE.findall(example.input)
    self.assertTrue(all(kind == options["value_type"] for kind, _, _ in needles))
    if options["haystack"] == "noise":
      self.assertLen(needles, options["num_keys"] * options["num_values"])
    else:
      self.assertLen(needles, example.metadata["haystack_size"] + 1)
    self.assertLen(example.answers, options["num_queries"] * options["num_values"])
    for answer in example.answers:
      self.assertEqual(example.input.count(answer), 1)
    # The needles of the asked keys hold exactly the answers (no distractor shares a key).
    asked = [value for _, key, value in needles if key in example.metadata["query_keys"]]
    self.assertCountEqual(asked, example.answers)
    self.assertTrue(all(0 <= d < 1 for d in example.metadata["depths"]))

  def test_value_formats(self):
    number = _generate("niah_single_1")[0].answers[0]
    self.assertRegex(number, r"^[1-9]\d{6}$")
    word = _generate("niah_single_words")[0].answers[0]
    self.assertRegex(word, r"^[a-z]+-[a-z]+$")
    uuid = _generate("niah_single_uuids")[0].answers[0]
    self.assertRegex(uuid, r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

  def test_singular_template_for_one_value_plural_otherwise(self):
    single = _generate("niah_single_1")[0]
    self.assertTrue(single.input.startswith("A special magic number is hidden"))
    self.assertRegex(single.answer_prefix, r"^ The special magic number for \S+ mentioned in the "
                     r"provided text is$")
    multi = _generate("niah_multiquery")[0]
    self.assertTrue(multi.input.startswith("Some special magic numbers are hidden"))
    keys = multi.metadata["query_keys"]
    self.assertIn(f"for {keys[0]}, {keys[1]}, {keys[2]}, and {keys[3]} mentioned",
                  multi.answer_prefix)

  def test_content_is_shared_across_lengths(self):
    short, long = _generate("niah_multivalue", length=2000), _generate("niah_multivalue",
                                                                         length=9000)
    self.assertEqual(short[0].answers, long[0].answers)
    self.assertLess(short[0].metadata["haystack_size"], long[0].metadata["haystack_size"])

  def test_128k_token_prompt(self):
    example = _generate("niah_single_1", length=131072)[0]
    self.assertBetween(example.length_tokens, 131072 - 100, 131072)
    self.assertEqual(example.input.count(example.answers[0]), 1)

  def test_model_template_wraps_the_task_and_the_answer_prefix_follows(self):
    example = _generate("niah_single_1", model_template="[INST] {task_template} [/INST]")[0]
    self.assertTrue(example.input.startswith("[INST] A special magic number"))
    self.assertTrue(example.input.endswith(" [/INST]" + example.answer_prefix))
    self.assertLessEqual(example.length_tokens, 3000)


class VariableTrackingTest(parameterized.TestCase):

  @parameterized.parameters((1, 4, 1), (3, 2, 0), (2, 12, 2))
  def test_chains_resolve_to_the_answers(self, num_chains, num_hops, num_shots):
    example = _generate("vt", length=8000, num_chains=num_chains, num_hops=num_hops,
                        num_shots=num_shots)[0]
    sections = example.input.split("Memorize and track the chain(s)")
    self.assertLen(sections, num_shots + 2)
    for i, section in enumerate(sections[1:], start=1):
      is_task = i == len(sections) - 1  # The shots come first.
      query = int(re.search(r"assigned the value (\d+) in the text above", section).group(1))
      values = _resolve_chains(section)
      holders = {name for name, value in values.items() if value == query}
      hops = num_hops if is_task else min(num_hops, 10)
      self.assertLen(values, num_chains * (hops + 1))
      if is_task:
        self.assertEqual(holders, set(example.answers))
        self.assertLen(example.answers, num_hops + 1)
        self.assertRegex(example.answer_prefix, rf"{num_hops + 1} variables are assigned the "
                         rf"value {query}, they are: $")
      else:  # A shot ends with its answer.
        shown = section.split("they are: ")[1].split()
        self.assertEqual(set(shown), holders)
        self.assertTrue(all(len(name) == 3 for name in shown))


class CommonWordsTest(parameterized.TestCase):

  @parameterized.parameters((3000, 6, 1), (12000, 30, 3), (4500, 6, 1))
  def test_answers_are_the_common_words_with_ruler_repeats(self, length, common, uncommon):
    # At 4500 bytes RULER's long setting does not fit: it falls back to the short one.
    example = _generate("cwe", length=length)[0]
    self.assertEqual((example.metadata["common_repeats"], example.metadata["uncommon_repeats"]),
                     (common, uncommon))
    main_list = example.input.split("Below is a numbered list of words.")[-1]
    words = re.findall(r"\d+\. (\S+)", main_list.split("\nQuestion:")[0])
    counts = collections.Counter(words)
    self.assertLen(example.answers, 10)
    self.assertTrue(all(counts[a] == common for a in example.answers))
    self.assertTrue(all(c == uncommon for w, c in counts.items() if w not in example.answers))
    shot_list = example.input.split("Below is a numbered list of words.")[1]
    self.assertFalse(set(example.answers) & set(re.findall(r"\d+\. (\S+)", shot_list)))

  def test_more_distinct_words_than_the_vocabulary(self):
    example = _generate("cwe", length=60000, num_shots=0)[0]
    self.assertGreater(example.metadata["haystack_size"], len(vocabulary.single_words()))


class FrequentWordsTest(absltest.TestCase):

  def test_answers_are_the_three_most_frequent_coded_words(self):
    for length in (1000, 20000):
      example = _generate("fwe", length=length)[0]
      context = example.input.split("coded words. ")[1].split("\nQuestion:")[0]
      counts = collections.Counter(w for w in context.split() if w != "...")
      ranked = [c for _, c in counts.most_common()]
      self.assertEqual({w for w, _ in counts.most_common(3)}, set(example.answers))
      self.assertGreater(ranked[2], ranked[3])
      self.assertTrue(all(len(a) == 6 for a in example.answers))
      self.assertEqual(example.metadata["vocab_size"], length // 50)

  def test_zeta(self):
    self.assertAlmostEqual(frequent_words.zeta(2.0), 1.6449340668482264, places=12)
    self.assertAlmostEqual(frequent_words.zeta(4.0), 1.0823232337111382, places=12)


class ScoringTest(absltest.TestCase):

  def test_string_match_all(self):
    answers = ["1234567", "7654321"]
    self.assertEqual(ruler.string_match_all("1234567 and 7654321", answers), 1.0)
    self.assertEqual(ruler.string_match_all("only 1234567", answers), 0.5)
    self.assertEqual(ruler.string_match_all("nothing", answers), 0.0)
    self.assertEqual(ruler.string_match_all("The Answer: Breezy-WOLF", ["breezy-wolf"]), 1.0)

  def test_string_match_part(self):
    self.assertEqual(ruler.string_match_part("only 1234567", ["1234567", "7654321"]), 1.0)
    self.assertEqual(ruler.string_match_part("neither", ["1234567", "7654321"]), 0.0)

  def test_score_uses_the_task_metric(self):
    self.assertEqual(ruler.score("cwe", "apple, MELON", ["apple", "melon", "kiwi", "plum"]), 0.5)
    with self.assertRaisesRegex(ValueError, "did you mean 'cwe'"):
      ruler.score("cwf", "x", ["x"])

  def test_score_examples_means_per_task(self):
    examples = _generate("niah_single_1", num_examples=2) + _generate("vt", length=4000)
    predictions = [examples[0].answers[0], "no idea", " ".join(examples[2].answers[:2])]
    scores = ruler.score_examples(examples, predictions)
    self.assertEqual(scores, {"niah_single_1": 0.5, "vt": 0.4})

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "answers must be a non-empty sequence"):
      ruler.string_match_all("x", "x")
    with self.assertRaisesRegex(ValueError, "answers must be a non-empty sequence"):
      ruler.string_match_all("x", [])
    with self.assertRaisesRegex(ValueError, "prediction must be a str"):
      ruler.string_match_all(None, ["x"])
    examples = _generate("niah_single_1", num_examples=2)
    with self.assertRaisesRegex(ValueError, "one entry per example"):
      ruler.score_examples(examples, ["a"])


class BadArgumentsTest(parameterized.TestCase):

  def test_unknown_task_suggests_the_closest(self):
    with self.assertRaisesRegex(ValueError, r"got 'niah_singel_1'; did you mean 'niah_single_1'"):
      _generate("niah_singel_1")

  @parameterized.named_parameters(
      ("zero_examples", dict(num_examples=0), "num_examples must be an integer >= 1, got 0"),
      ("bool_examples", dict(num_examples=True), "num_examples must be an integer >= 1, got True"),
      ("float_length", dict(length=3000.0), "length must be an integer >= 1, got 3000.0"),
      ("negative_seed", dict(seed=-1), "seed must be an integer >= 0, got -1"),
      ("template", dict(model_template="[INST]"),
       "model_template must be a str holding {task_template} once, got '[INST]'"),
  )
  def test_bad_counts_and_template(self, overrides, message):
    kwargs = dict(length=3000, num_examples=1, seed=0)
    kwargs.update(overrides)
    with self.assertRaisesWithLiteralMatch(ValueError, message):
      ruler.generate("niah_single_1", tokenizer=BYTES, **kwargs)

  def test_tokenizer_without_encode(self):
    with self.assertRaisesRegex(ValueError, "tokenizer must have an encode.*got object"):
      ruler.generate("vt", length=3000, tokenizer=object(), num_examples=1, seed=0)

  @parameterized.named_parameters(
      ("unknown_option", "niah_multikey_1", dict(num_key=3), "did you mean 'num_keys'"),
      ("queries_over_keys", "niah_multikey_1", dict(num_queries=5),
       r"num_queries must be at most num_keys \(4\), got 5"),
      ("bad_value_type", "niah_single_1", dict(value_type="uuid"),
       r"value_type must be one of .*got 'uuid'; did you mean 'uuids'"),
      ("zero_hops", "vt", dict(num_hops=0), "num_hops must be an integer >= 1, got 0"),
      ("bool_chains", "vt", dict(num_chains=True), "num_chains must be an integer >= 1, got True"),
      ("alpha", "fwe", dict(alpha=1.0), "alpha must be a finite number > 1.0, got 1.0"),
      ("small_vocab", "fwe", dict(vocab_size=4), "vocab_size must be an integer >= 5, got 4"),
      ("repeats", "cwe", dict(common_repeats=3, uncommon_repeats=3),
       r"common_repeats must be greater than uncommon_repeats \(3\), got 3"),
  )
  def test_task_options_out_of_range(self, task, options, message):
    with self.assertRaisesRegex(ValueError, message):
      _generate(task, **options)


class LengthFitTest(absltest.TestCase):

  def test_largest_fitting_size_of_a_nonlinear_count(self):
    counts = lambda n: 50 + 7 * n + (n % 5) * 3  # Not monotone step to step.
    size, draft, tokens = length_fit.fit_to_length(lambda n: n, counts, length=10000,
                                                   min_units=1)
    self.assertEqual((draft, tokens), (size, counts(size)))
    self.assertLessEqual(tokens, 10000)
    self.assertGreater(counts(size + 1), 10000)

  def test_too_long_minimum(self):
    with self.assertRaises(length_fit.PromptTooLong) as caught:
      length_fit.fit_to_length(lambda n: n, lambda n: 100 + n, length=50, min_units=3)
    self.assertEqual(caught.exception.min_tokens, 103)

  def test_special_tokens_are_not_counted(self):
    self.assertEqual(length_fit.token_counter(BosTokenizer())("abc"), 3)
    example = ruler.generate("fwe", length=1000, tokenizer=BosTokenizer(), num_examples=1,
                             seed=0)[0]
    self.assertEqual(example.length_tokens, len(example.input.encode("utf-8")))


if __name__ == "__main__":
  absltest.main()
