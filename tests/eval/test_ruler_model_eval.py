"""pejax.eval.ruler.model_eval: RULER prompts through a decoder, scored by task and length."""

from __future__ import annotations

import json
import pathlib
from unittest import mock

from flax import nnx
import numpy as np
import pytest

from pejax.eval import ruler
from pejax.eval.ruler import model_eval
from pejax.hf.tokenizer import ByteTokenizer
from pejax.nn import Decoder, DecoderConfig
from pejax.nn.positional.learned import LearnedConfig

TOKENIZER = ByteTokenizer()


@pytest.fixture(scope="module", name="model")
def _model():
  return Decoder(DecoderConfig(vocab_size=256, d_model=16, num_heads=2, num_layers=1),
                 rngs=nnx.Rngs(0))


def _answering(fraction_right):
  """A stand-in for pejax.generate that writes each prompt's answers (or a wrong one)."""
  calls = []

  def fake_generate(model, tokens, *, prompt_mask, max_new_tokens, stop_tokens=()):
    del model
    calls.append((np.asarray(tokens).shape, max_new_tokens))
    fake_generate.stop_tokens = stop_tokens
    out = np.zeros((len(tokens), max_new_tokens), np.int32)
    for i, (row, mask) in enumerate(zip(np.asarray(tokens), np.asarray(prompt_mask))):
      prompt = TOKENIZER.decode(row[mask == 1])
      answer = fake_generate.answers[prompt]
      text = (" " + ", ".join(answer)) if fake_generate.right[prompt] else " 0000000"
      ids = TOKENIZER.encode(text)[:max_new_tokens]
      out[i, :len(ids)] = ids
    return out

  fake_generate.calls = calls
  fake_generate.fraction = fraction_right
  return fake_generate


def _run_with(fake, task, length, examples, **kwargs):
  cell = ruler.generate(task, length=length, tokenizer=TOKENIZER, num_examples=examples, seed=0)
  fake.answers = {e.input: e.answers for e in cell}
  right = int(round(fake.fraction * examples))
  fake.right = {e.input: i < right for i, e in enumerate(cell)}
  with mock.patch("pejax.nn.generation.generate", fake):
    return model_eval.ruler_accuracy(None, TOKENIZER, tasks=[task], lengths=[length],
                                     examples=examples, seed=0, progress=None, **kwargs)


def test_right_answers_score_one_and_wrong_ones_zero():
  (result,) = _run_with(_answering(1.0), "niah_multivalue", 1000, 3)
  assert (result.accuracy, result.status, result.examples) == (1.0, "ok", 3)
  (result,) = _run_with(_answering(0.0), "niah_multivalue", 1000, 3)
  assert result.accuracy == 0.0
  (result,) = _run_with(_answering(0.5), "niah_single_1", 600, 4)
  assert result.accuracy == 0.5


def test_prompts_are_left_padded_to_the_length_in_full_batches():
  fake = _answering(1.0)
  _run_with(fake, "niah_single_1", 600, 5, batch_size=4)
  # Two batches of 4 rows (the last one topped up), each exactly the cell's length wide; the
  # budget is RULER's 128 rounded to the 64-token bucket.
  assert fake.calls == [((4, 600), 128), ((4, 600), 128)]


def test_stop_tokens_reach_generate_and_end_the_scored_text(model):
  fake = _answering(1.0)
  _run_with(fake, "niah_single_1", 600, 2)
  assert fake.stop_tokens == ()  # RULER's default: the whole budget is decoded and scored.
  _run_with(fake, "niah_single_1", 600, 2, stop_tokens=[46])
  assert fake.stop_tokens == (46,)
  # A real decoder: the stop token ends the row, padding after it (the text after an answer
  # is not scored). The stop is the token the model writes first, so it surely comes.
  from pejax.nn import generation  # pylint: disable=g-import-not-at-top
  seen, real_generate = [], generation.generate

  def recording_generate(*args, **kwargs):
    seen.append((kwargs["stop_tokens"], np.asarray(real_generate(*args, **kwargs))))
    return seen[-1][1]

  cell = dict(tasks=["niah_single_1"], lengths=[600], examples=1, batch_size=1, progress=None)
  with mock.patch("pejax.nn.generation.generate", recording_generate):
    (free,) = model_eval.ruler_accuracy(model, TOKENIZER, **cell)
    stop = int(seen[0][1][0, 0])
    (stopped,) = model_eval.ruler_accuracy(model, TOKENIZER, stop_tokens=(stop,), **cell)
  (_, without), (stops, out) = seen
  assert stops == (stop,) and out[0, 0] == stop
  assert not out[0, 1:].any() and without[0, 1:].any()
  assert (free.status, stopped.status) == ("ok", "ok")


@pytest.mark.parametrize("stop_tokens, shown", [
    ("." , "'.'"), ([True], "True"), ([-1], "-1"), ([256], "256"), ([2.0], "2.0")])
def test_bad_stop_tokens_are_named_before_decoding(model, stop_tokens, shown):
  with pytest.raises(ValueError, match=r"stop_tokens must .*" + shown.replace(".", r"\.")):
    model_eval.ruler_accuracy(model, TOKENIZER, tasks=["niah_single_1"], lengths=[600],
                              examples=1, stop_tokens=stop_tokens, progress=None)


def test_the_budget_covers_the_longest_answer():
  fake = _answering(1.0)
  (result,) = _run_with(fake, "cwe", 1800, 1)
  answers = ", ".join(next(iter(fake.answers.values())))
  assert result.new_tokens >= len(TOKENIZER.encode(answers)) + model_eval.ANSWER_MARGIN
  assert result.new_tokens % model_eval.NEW_TOKENS_BUCKET == 0
  assert result.accuracy == 1.0


def test_a_real_decoder_gives_a_score_per_cell(model, tmp_path):
  results = model_eval.ruler_accuracy(model, TOKENIZER, tasks=["niah_multikey_2"],
                                      lengths=[420, 512], examples=2, seed=0, progress=None)
  assert [(r.task, r.length, r.status) for r in results] == [
      ("niah_multikey_2", 420, "ok"), ("niah_multikey_2", 512, "ok")]
  assert all(0.0 <= r.accuracy <= 1.0 and r.prompt_tokens <= r.length for r in results)
  table = model_eval.format_ruler_table(results, token="byte")
  assert table.splitlines()[0].split()[:3] == ["task", "420", "512"]
  assert model_eval.plot_ruler(results, tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
  json.dumps([r.to_json() for r in results])


def test_a_learned_table_shorter_than_the_prompt_is_not_a_number(model):
  del model
  short = Decoder(DecoderConfig(vocab_size=256, d_model=16, num_heads=2, num_layers=1,
                                pe=LearnedConfig(max_position=256)), rngs=nnx.Rngs(0))
  (result,) = model_eval.ruler_accuracy(short, TOKENIZER, tasks=["niah_multikey_2"],
                                        lengths=[420], examples=1, seed=0, progress=None)
  assert result.accuracy is None and result.status.startswith("n/a (")
  assert "n/a" in model_eval.format_ruler_table([result])


def test_bad_settings_are_named_errors(model):
  with pytest.raises(ValueError, match=r"did you mean 'niah_single_1'"):
    model_eval.parse_tasks("niah_single_1,niah_singel_1")
  assert model_eval.parse_tasks("all") == list(ruler.task_names())
  with pytest.raises(ValueError, match=r"at least \d+ tokens for task 'vt'.*got 512"):
    model_eval.ruler_accuracy(model, TOKENIZER, tasks=["vt"], lengths=[512], examples=1)
  for name, kwargs in (("examples", {"examples": 0}), ("batch_size", {"batch_size": True}),
                       ("examples", {"examples": 2.5})):
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
      model_eval.ruler_accuracy(model, TOKENIZER, tasks=["fwe"], lengths=[700],
                                **{"examples": 1, **kwargs})
