r"""``python -m pejax.sample RUN --prompt "..."``: text from a trained run.

    python -m pejax.sample runs/rope-L128-stdlib-1a2b3c --prompt "def main("
    python -m pejax.sample RUN --prompt "import " --max_new_tokens=128 --temperature=0.8 \
        --top_p=0.95 --top_k=40 --seed=1 --step=400

Loads the run (:func:`pejax.load_run`: its decoder at the latest checkpoint or ``--step``, and
its tokenizer), generates with :func:`pejax.generate` (``--temperature=0``: greedy;
``--top_k=0`` and ``--top_p=1`` switch those filters off) and prints the prompt followed by the
continuation (up to a stop token of the tokenizer, if it has any; byte-level runs have none).

Bad arguments (a temperature below 0 or NaN, ``--top_p`` outside (0, 1], ``--max_new_tokens``
below 1, a prompt longer than the model takes, a directory that is not a run, a step without a
checkpoint) are one line ``python -m pejax.sample: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Optional, Sequence

import jax
import numpy as np

from pejax import one_line_parser
from pejax.nn.generation import generate
from pejax.train import run_loading


def _check_settings(*, max_new_tokens: Any, temperature: Any, top_k: Any, top_p: Any) -> None:
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or (
      max_new_tokens < 1):
    raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
      math.isfinite(temperature) and temperature >= 0):
    raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
    raise ValueError(f"top_k must be an integer >= 0 (0: off), got {top_k!r}")
  if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
    raise ValueError(f"top_p must be in (0, 1] (1: off), got {top_p!r}")
  if temperature == 0 and (top_k or top_p < 1):
    raise ValueError(f"top_k={top_k} / top_p={top_p} only apply when sampling; give "
                     "temperature > 0 (temperature=0 is greedy decoding)")


def _prompt_limit(model: Any) -> Optional[int]:
  """The most positions the model's PEs take (a learned table's size), or ``None``."""
  limits = [pe.max_length for pe in model.layer_pes()
            if getattr(pe, "max_length", None) is not None]
  return min(limits) if limits else None


def sample(run: run_loading.LoadedRun, prompt: str, *, max_new_tokens: int = 64,
           temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
           seed: int = 0) -> str:
  """The prompt followed by ``max_new_tokens`` generated tokens (fewer after a stop token).

  Args:
    run: a loaded run (:func:`pejax.load_run`).
    prompt: the text to continue (at least one token).
    max_new_tokens: how many tokens to generate (>= 1).
    temperature: 0 for greedy decoding; > 0 samples from ``softmax(logits / temperature)``.
    top_p: nucleus sampling's probability mass; 1 switches it off.
    top_k: keep the k most likely tokens; 0 switches it off.
    seed: the sampling PRNG seed.

  Returns:
    The text: the prompt as given, then the decoded continuation.

  Raises:
    ValueError: naming the argument and the value, for a bad setting, an empty prompt, or a
      prompt (plus ``max_new_tokens``) longer than the model's positions.
  """
  _check_settings(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                  top_p=top_p)
  if not isinstance(prompt, str):
    raise ValueError(f"prompt must be a str, got {type(prompt).__name__}")
  tokenizer, model = run.tokenizer, run.model
  ids = [int(i) for i in np.asarray(tokenizer.encode(prompt)).reshape(-1)]
  if not ids:
    raise ValueError(f"prompt must be at least one token, got {prompt!r}")
  limit = _prompt_limit(model)
  if limit is not None and len(ids) + max_new_tokens > limit:
    raise ValueError(f"prompt of {len(ids)} tokens plus max_new_tokens={max_new_tokens} is "
                     f"longer than the model takes ({limit} positions: its learned position "
                     f"table); shorten the prompt or generate at most {max(limit - len(ids), 0)}"
                     " tokens")
  vocab = model.config.vocab_size
  stops = tuple(t for t in getattr(tokenizer, "eos_token_ids", ()) if 0 <= t < vocab)
  new = generate(model, [ids], max_new_tokens=max_new_tokens, temperature=float(temperature),
                 top_k=top_k or None, top_p=None if top_p >= 1 else float(top_p),
                 rng=jax.random.PRNGKey(seed), stop_tokens=stops)
  new_ids = [int(t) for t in np.asarray(new)[0]]
  for position, token in enumerate(new_ids):
    if token in stops:
      new_ids = new_ids[:position + 1]
      break
  shown_prompt = tokenizer.decode(ids)
  text = tokenizer.decode(ids + new_ids)
  continuation = text[len(shown_prompt):] if text.startswith(shown_prompt) else (
      tokenizer.decode(new_ids))
  return prompt + continuation


def main(argv: Sequence[str]) -> int:
  """``python -m pejax.sample RUN --prompt ...``: prints the text; 2 on a usage error.

  Args:
    argv: the arguments after the program name.

  Returns:
    The exit status (0).
  """
  parser = one_line_parser.OneLineErrorParser(prog="python -m pejax.sample",
                          description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="\n\n".join(__doc__.split("\n\n")[1:]))
  parser.add_argument("run", help="the run directory (launch.py --workdir)")
  parser.add_argument("--prompt", required=True, help="the text to continue")
  parser.add_argument("--max_new_tokens", type=int, default=64, help="tokens to generate")
  parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
  parser.add_argument("--top_p", type=float, default=1.0, help="nucleus mass; 1: off")
  parser.add_argument("--top_k", type=int, default=0, help="keep the k most likely; 0: off")
  parser.add_argument("--seed", type=int, default=0, help="sampling seed")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  args = parser.parse_args(list(argv))
  settings = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                  top_k=args.top_k, top_p=args.top_p)
  from pejax.cli import pe_modules  # pylint: disable=g-import-not-at-top
  from pejax.cli.command_line_error import CommandLineError  # pylint: disable=g-import-not-at-top
  try:
    _check_settings(**settings)  # Before the run is loaded.
    pe_modules.import_recorded_pe_modules(args.run)
    run = run_loading.load_run(args.run, step=args.step)
    text = sample(run, args.prompt, seed=args.seed, **settings)
  except (ValueError, CommandLineError) as e:
    parser.error(str(e))
  print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
