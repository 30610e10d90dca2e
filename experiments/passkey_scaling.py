r"""Passkey retrieval beyond the training length: zero-shot RoPE scalings and short fine-tunes.

    python -m experiments.passkey_scaling --quick       # L=128, 1 seed: indicative
    python -m experiments.passkey_scaling               # L=256, 3 seeds
    python launch.py --study=passkey_scaling --quick
    python launch.py --study=passkey_scaling --init_from_hf=<hf dir>   # a pretrained model

A scaling can only be judged on a model that retrieves at its training length and whose
retrieval skill does not depend on the amount of filler it saw. So (the YaRN paper's protocol,
at toy scale):

1. A RoPE decoder is trained at length L on a mixture of language modelling (the ``stdlib``
   corpus) and passkey examples whose haystack is corpus text (:mod:`pejax.data.passkey_mixture`:
   a key sentence at a random depth of a random text chunk, asked for at the end), **until it
   retrieves at L** (held-out passkey exact match at L >= 0.9, checked every 100 steps) or a
   step cap (:mod:`experiments.algorithmic.convergence`).
2. Zero-shot: the trained weights in a decoder rebuilt with each RoPE scaling (PI = linear,
   NTK, dynamic NTK, YaRN, llama3) at ``factor = length / L``, scored at 1x, 2x, 4x L and key
   depths 0..1.
3. Fine-tuned: a short fine-tune at 2L with the scaling at factor 2 (PI and YaRN; plain RoPE
   fine-tuned at 2L as the control), scored at 2L and 4L (beyond the fine-tune length).

With ``--init_from_hf=DIR`` (a local Hugging Face checkpoint with its ``tokenizer.json``) step 1
is replaced by the loaded model and step 3 is skipped: the zero-shot scalings are compared on the
natural-language passkey prompt of Mohtashami and Jaggi with the model's own tokenizer
(:mod:`pejax.data.passkey_text`), at 1x, 2x and 4x L, where L is the checkpoint's original
context (``original_max_position_embeddings`` of its scaling, else ``max_position_embeddings``;
``--train_len`` sets another). That is the YaRN paper's passkey evaluation of a real model.

Accuracy = exact match of the whole key (teacher forcing = greedy decoding). Verdicts compare
seeds (a claim holds when every seed of the winner is above every seed of the loser by the
margin); one seed is indicative.

References:
  Mohtashami and Jaggi, "Landmark Attention", NeurIPS 2023, arXiv:2305.16300 (the task).
  Chen et al., "Extending Context Window of Large Language Models via Positional Interpolation",
  2023, arXiv:2306.15595. bloc97, "NTK-Aware Scaled RoPE", 2023. Peng et al., "YaRN: Efficient
  Context Window Extension of Large Language Models", ICLR 2024, arXiv:2309.00071.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import dataclasses
import json
import math
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments import context_extension
from experiments.algorithmic import convergence
from experiments.algorithmic import seed_comparison
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs

STUDY = "passkey_scaling"
SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3")
FINETUNE_SCALINGS = ("none", "linear", "yarn")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
RETRIEVES_AT_L = 0.9  # The trained model retrieves: passkey accuracy at L >= 0.9.
FAILS_BEYOND = 0.5  # Plain RoPE fails beyond L: mean accuracy over lengths > L <= 0.5.
BETTER_BY = 0.1  # "Better": medians at least this far apart, on top of separated seeds.


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep.

  Attributes:
    train_len: training length L.
    seeds: model seeds.
    multipliers: evaluation lengths as multiples of L.
    recipe: training to retrieval at L (fit threshold on held-out passkey accuracy at L).
    finetune_steps: steps of each fine-tune at ``finetune_multiplier`` L.
    finetune_multiplier: fine-tuning length (and factor) as a multiple of L.
    passkey_fraction: share of passkey rows in the training mixture.
    depths: key depths.
    examples: examples per (length, depth) cell.
    scalings: zero-shot scalings compared.
    finetune_scalings: scalings fine-tuned.
  """

  train_len: int
  seeds: tuple
  multipliers: tuple
  recipe: convergence.Recipe
  finetune_steps: int
  finetune_multiplier: int = 2
  passkey_fraction: float = 0.5
  depths: tuple = DEPTHS
  examples: int = 16
  scalings: tuple = SCALINGS
  finetune_scalings: tuple = FINETUNE_SCALINGS

  @property
  def lengths(self) -> List[int]:
    return [self.train_len * m for m in self.multipliers]

  @property
  def finetune_len(self) -> int:
    return self.train_len * self.finetune_multiplier


def base_config(options: study_options.StudyOptions) -> ml_collections.ConfigDict:
  """A RoPE decoder (2 layers, d_model 128, lr 2e-3, batch 16) on the stdlib corpus."""
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  config = experiment_config.get_default_config()
  config.data.name = "stdlib"
  config.pe.name = "rope"
  config.data.train_len = 128 if options.quick else 256
  config.data.batch_size = 16
  config.model.d_model = 128
  config.model.num_layers = 2
  config.optim.learning_rate = 2e-3
  config.optim.warmup_steps = 100
  study_options.apply_overrides(config, options.overrides)
  return config


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """Quick: cap 1500 steps, fine-tunes of 100 steps, 1 seed. Full: cap 6000, 300, 3 seeds."""
  cap = options.steps or (1500 if options.quick else 6000)
  return Settings(
      train_len=int(config.data.train_len), seeds=tuple(options.seed_list(
          (0,) if options.quick else (0, 1, 2))),
      multipliers=(1, 2, 4), recipe=convergence.Recipe(
          max_steps=cap, check_every=100, check_examples=32, fit_threshold=RETRIEVES_AT_L),
      finetune_steps=100 if options.quick else 300, examples=8 if options.quick else 16)


def _text(split: str) -> np.ndarray:
  corpus = trained_runs.load_corpus("stdlib")
  return np.asarray(corpus.train if split == "train" else corpus.valid, dtype=np.uint8)


def passkey_cells(model, *, length: int, depths: Sequence[float], examples: int,
                  seed: int) -> List[Dict[str, Any]]:
  """Accuracy at one length for each depth (haystacks from the validation split)."""
  from pejax.data import passkey_mixture  # pylint: disable=g-import-not-at-top
  from pejax.data import synthetic_example  # pylint: disable=g-import-not-at-top
  text = _text("valid")
  rng = np.random.default_rng([seed, length])
  cells = []
  for depth in depths:
    rows = [passkey_mixture.haystack_passkey_example(rng, text, length=length, depth=depth)
            for _ in range(examples)]
    batch = synthetic_example.encode_examples(rows, seq_len=length)
    acc = float(np.mean(convergence.exact_match(model, batch, chunk=max(1, 16384 // length))))
    cells.append({"length": length, "depth": depth, "accuracy": acc})
  return cells


def _mixture(settings: Settings, length: int):
  from pejax.data import passkey_mixture  # pylint: disable=g-import-not-at-top
  text = _text("train")
  return lambda rng, step, b: passkey_mixture.mixture_batch(
      rng, text, batch_size=b, seq_len=length, passkey_fraction=settings.passkey_fraction)


def _key(config: ml_collections.ConfigDict, settings: Settings, length: int, what: str
         ) -> Dict[str, Any]:
  key = convergence.run_key(config, settings.recipe, task="passkey_mixture", train_sizes=(),
                            row_len=length, randomized=None)
  key.update({"what": what, "passkey_fraction": settings.passkey_fraction})
  return key


def train_base(config: ml_collections.ConfigDict, settings: Settings, *,
               runs_dir: pathlib.Path, log: Callable[[str], None]) -> convergence.FitResult:
  """Trains until passkey accuracy at L (all depths, held out) reaches the recipe threshold."""
  L = settings.train_len
  batches = _mixture(settings, L)
  b = int(config.data.batch_size)
  check = lambda model: float(np.mean([c["accuracy"] for c in passkey_cells(
      model, length=L, depths=(0.0, 0.5, 1.0), examples=max(1, settings.recipe.check_examples
                                                            // 3), seed=7)]))
  return convergence.train_until(
      config, settings.recipe, key=_key(config, settings, L, "base"), runs_dir=runs_dir,
      label=f"passkey-rope-L{L}-s{int(config.seed)}",
      make_batch=lambda rng, step: batches(rng, step, b), check=check, log=log)


def scaled_pe(config: ml_collections.ConfigDict, name: str, factor: float):
  """The config's RoPE with scaling ``name`` at ``factor`` (``None`` for ``"none"``)."""
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  if name == "none":
    return None
  model_config = decoder_from_config.decoder_config_from(config)
  return decoder_from_config.with_rope_scaling(model_config.pe, name, factor=factor,
                                      original_max_position=int(config.data.train_len),
                                      head_dim=model_config.head_dim)


def finetune(base: convergence.FitResult, config: ml_collections.ConfigDict,
             settings: Settings, name: str, *, runs_dir: pathlib.Path,
             log: Callable[[str], None]) -> convergence.FitResult:
  """``finetune_steps`` steps at ``finetune_multiplier`` L with scaling ``name`` (YaRN protocol)."""
  length = settings.finetune_len
  recipe = convergence.Recipe(max_steps=settings.finetune_steps, check_every=
                              settings.finetune_steps, check_examples=3, fit_threshold=1.0)
  batches = _mixture(settings, length)
  b = max(1, int(config.data.batch_size) * settings.train_len // length)  # Same tokens/step.
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.optim.warmup_steps = min(int(config.optim.warmup_steps), settings.finetune_steps // 5)
  check = lambda model: float(np.mean([c["accuracy"] for c in passkey_cells(
      model, length=length, depths=(0.5,), examples=3, seed=9)]))
  return convergence.train_until(
      config, recipe, key={**_key(config, settings, length, f"finetune-{name}"),
                           "base": str(base.run_dir)},
      runs_dir=runs_dir, label=f"passkey-ft-{name}-{length}-s{int(config.seed)}",
      make_batch=lambda rng, step: batches(rng, step, b), check=check,
      pe=scaled_pe(config, name, settings.finetune_multiplier),
      init_from=pathlib.Path(base.run_dir) / convergence.PARAMS_FILE, log=log)


def evaluate_seed(config: ml_collections.ConfigDict, settings: Settings, *,
                  runs_dir: pathlib.Path, log: Callable[[str], None]) -> Dict[str, Any]:
  """Base training, zero-shot grid and fine-tunes of one seed (cached in the base run dir)."""
  base = train_base(config, settings, runs_dir=runs_dir, log=log)
  log(f"  seed {config.seed}: base " + (f"retrieves at L after {base.steps_to_fit} steps" if
                                         base.fit else f"did not reach {RETRIEVES_AT_L} at L "
                                         f"(best {base.best_in_dist:.2f}) in {base.steps} steps"))
  tunes = {n: finetune(base, config, settings, n, runs_dir=runs_dir, log=log)
           for n in settings.finetune_scalings}

  def compute():
    out = {"zero_shot": {}, "finetuned": {}}
    model = convergence.load_model(base, config)
    for name in settings.scalings:
      cells = []
      for length in settings.lengths:
        factor = max(1.0, length / settings.train_len)
        scaled = model if name == "none" else context_extension.scaled_model(
            model, config, name, factor)
        cells += passkey_cells(scaled, length=length, depths=settings.depths,
                               examples=settings.examples, seed=1000 + int(config.seed))
      out["zero_shot"][name] = cells
    for name, tuned in tunes.items():
      tuned_model = convergence.load_model(
          tuned, config, pe=scaled_pe(config, name, settings.finetune_multiplier))
      cells = []
      for length in settings.lengths:
        if length >= settings.finetune_len:
          cells += passkey_cells(tuned_model, length=length, depths=settings.depths,
                                 examples=settings.examples, seed=1000 + int(config.seed))
      out["finetuned"][name] = cells
    return out

  key = {"lengths": settings.lengths, "depths": list(settings.depths),
         "examples": settings.examples, "scalings": list(settings.scalings),
         "finetuned": {n: str(t.run_dir) for n, t in tunes.items()}, "version": 1}
  grids = result_cache.cached(pathlib.Path(base.run_dir) / "passkey_eval.json", key, compute)
  return {"base": base, "finetunes": tunes, **grids}


def mean_accuracy(cells: Sequence[Mapping[str, Any]], length: int) -> Optional[float]:
  """Mean accuracy over depths at one length (``None`` when no cell was evaluated)."""
  values = [c["accuracy"] for c in cells if c["length"] == length and c["accuracy"] is not None]
  return sum(values) / len(values) if values else None


def beyond(cells: Sequence[Mapping[str, Any]], train_len: int) -> Optional[float]:
  """Mean accuracy over every cell longer than ``train_len``."""
  values = [c["accuracy"] for c in cells if c["length"] > train_len and c["accuracy"] is not None]
  return sum(values) / len(values) if values else None


def verdicts(numbers: Mapping[str, Mapping[str, Any]], settings: Settings, *,
             subject: str = "the trained model") -> List[expectations.Verdict]:
  """Published claims on seed spreads.

  Args:
    numbers: ``"at_L"`` -> spread of the base model's accuracy at L; ``"beyond"`` -> scaling ->
      spread of the zero-shot mean accuracy over lengths > L; ``"ft_at"`` / ``"ft_beyond"`` ->
      fine-tuned scaling -> spread at the fine-tune length / beyond it.
    settings: the sweep.
    subject: who is judged (a pretrained checkpoint instead of the study's trained models).
  """
  at_l, beyond_l = numbers["at_L"], numbers["beyond"]
  # Extension is judged on the seeds whose base model retrieves at L (the others cannot answer
  # it); "retrieving" (when given) counts them: {"n": k, "of": seeds, "left_out": [seed, ...]}.
  working = numbers.get("retrieving")
  majority = working is None or 2 * working["n"] > working["of"]
  if working is None:
    sanity = ("every seed's accuracy at L >= " f"{RETRIEVES_AT_L}", table_cells.median_cell(at_l,
                                                                                            3))
  else:
    sanity = (f"a majority of seeds retrieve (held-out accuracy at L >= {RETRIEVES_AT_L}) and "
              f"each of them scores >= {RETRIEVES_AT_L} at L on the test prompts",
              f"{working['n']} of {working['of']} seeds retrieve; at L "
              f"{table_cells.median_cell(at_l, 3)}")
  out = [expectations.verdict(
      f"Sanity: {subject} retrieves the key at its training length", *sanity,
      lambda: None if at_l["n"] == 0 else (majority and at_l["min"] >= RETRIEVES_AT_L),
      note="" if not working or not working["left_out"] else (
          f"seed(s) {', '.join(map(str, working['left_out']))} did not retrieve at L within "
          "the step cap; the extension claims below are judged on the other seeds"))]
  retrieves = at_l["n"] > 0 and majority and at_l["min"] >= RETRIEVES_AT_L
  note = "" if retrieves else (
      f"{subject} did not retrieve at L (in a majority of seeds), so extension beyond L is not "
      "judged on a working retriever.")
  if "none" in beyond_l:
    out.append(expectations.verdict(
        "Without scaling, RoPE fails to retrieve beyond L (Chen et al. 2023, Fig. 2)",
        f"every seed's mean accuracy of plain RoPE over lengths > L <= {FAILS_BEYOND}",
        f"none {table_cells.median_cell(beyond_l['none'], 3)}",
        lambda: None if not retrieves else beyond_l["none"]["max"] <= FAILS_BEYOND, note=note))
  for name, who in (("ntk", "NTK-aware (bloc97 2023)"), ("dynamic", "Dynamic NTK (bloc97 2023)"),
                    ("yarn", "YaRN (Peng et al. 2023)")):
    if name in beyond_l and "none" in beyond_l and "linear" in beyond_l:
      out.append(expectations.verdict(
          f"Zero-shot, {who} retrieves beyond L better than no scaling and PI",
          f"mean accuracy over lengths > L: every seed of {name} above every seed of none and "
          f"of linear, medians >= {BETTER_BY} apart (every seed of all three at 0: not "
          "measurable, floor)",
          seed_comparison.describe({k: beyond_l[k] for k in (name, "none", "linear")}),
          lambda name=name: None if not retrieves else seed_comparison.compare(
              {name: beyond_l[name]}, {"none": beyond_l["none"], "linear": beyond_l["linear"]},
              margin=BETTER_BY, floor=0.0), note=note, note_if_not_held=seed_comparison.why_not(
                  {name: beyond_l[name]}, {"none": beyond_l["none"],
                                           "linear": beyond_l["linear"]}, margin=BETTER_BY)))
  ft_at, ft_beyond = numbers["ft_at"], numbers["ft_beyond"]
  for name, who in (("linear", "PI (Chen et al. 2023)"), ("yarn", "YaRN (Peng et al. 2023)")):
    if name in ft_at:
      out.append(expectations.verdict(
          f"A short fine-tune at {settings.finetune_multiplier}L with {who} retrieves at "
          f"{settings.finetune_multiplier}L",
          f"every seed's accuracy at {settings.finetune_multiplier}L after "
          f"{settings.finetune_steps} steps >= {RETRIEVES_AT_L}",
          table_cells.median_cell(ft_at[name], 3),
          lambda name=name: None if not retrieves else ft_at[name]["min"] >= RETRIEVES_AT_L,
          note=note, note_if_not_held=(
              f"Reason: its lowest seed scores {table_cells.fmt(ft_at[name]['min'], 3)} at "
              f"{settings.finetune_multiplier}L." if ft_at[name].get("min") is not None
              else "")))
  if "yarn" in ft_beyond and "linear" in ft_beyond:
    out.append(expectations.verdict(
        "Fine-tuned YaRN extrapolates beyond its fine-tuning length better than fine-tuned PI "
        "(Peng et al. 2023)",
        f"accuracy beyond {settings.finetune_multiplier}L: every seed of yarn above every seed "
        f"of linear, medians >= {BETTER_BY} apart (every seed of both at 0: not measurable, "
        "floor)",
        seed_comparison.describe({k: ft_beyond[k] for k in ("yarn", "linear")}),
        lambda: None if not retrieves else seed_comparison.compare(
            {"yarn": ft_beyond["yarn"]}, {"linear": ft_beyond["linear"]}, margin=BETTER_BY,
            floor=0.0),
        note=note, note_if_not_held=seed_comparison.why_not(
            {"yarn": ft_beyond["yarn"]}, {"linear": ft_beyond["linear"]}, margin=BETTER_BY)))
  if "yarn" in ft_beyond and "none" in ft_beyond:
    out.append(expectations.verdict(
        "Control: fine-tuned YaRN retrieves beyond its fine-tuning length better than the same "
        "fine-tune without any scaling (the gain is the scaling's, not the fine-tune's)",
        f"accuracy beyond {settings.finetune_multiplier}L: every seed of yarn above every seed "
        f"of the unscaled fine-tune, medians >= {BETTER_BY} apart (every seed of both at 0: not "
        "measurable, floor)",
        seed_comparison.describe({k: ft_beyond[k] for k in ("yarn", "none")}),
        lambda: None if not retrieves else seed_comparison.compare(
            {"yarn": ft_beyond["yarn"]}, {"none": ft_beyond["none"]}, margin=BETTER_BY,
            floor=0.0),
        note=note, note_if_not_held=seed_comparison.why_not(
            {"yarn": ft_beyond["yarn"]}, {"none": ft_beyond["none"]}, margin=BETTER_BY)))
  return out


def plot_heatmaps(path: pathlib.Path, grids: Mapping[str, Sequence[Mapping[str, Any]]], *,
                  lengths: Sequence[int], depths: Sequence[float]) -> pathlib.Path:
  """One length x depth accuracy heatmap per scaling, side by side."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  names = list(grids)
  cols = min(3, len(names))
  rows = math.ceil(len(names) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows), squeeze=False,
                           constrained_layout=True)
  image = None
  for ax, name in zip(axes.flat, names):
    grid = np.full((len(lengths), len(depths)), np.nan)
    for c in grids[name]:
      if c["accuracy"] is not None and c["length"] in lengths:
        grid[lengths.index(c["length"]), list(depths).index(c["depth"])] = c["accuracy"]
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
    for i in range(len(lengths)):
      for j in range(len(depths)):
        if np.isfinite(grid[i, j]):
          ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=6,
                  color="white" if grid[i, j] < 0.5 else "black")
    ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
    ax.set_yticks(range(len(lengths)), [str(l) for l in lengths], fontsize=7)
    ax.set_title(name, fontsize=9)
    if ax in axes[-1]:
      ax.set_xlabel("key depth", fontsize=7)
    if ax in axes[:, 0]:
      ax.set_ylabel("length", fontsize=7)
  for ax in list(axes.flat)[len(names):]:
    ax.axis("off")
  if image is not None:
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="accuracy")
  fig.suptitle("Passkey accuracy (mean over seeds)", fontsize=9)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _mean_grid(per_seed: Sequence[Sequence[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
  cells: Dict[tuple, List[float]] = {}
  for grid in per_seed:
    for c in grid:
      cells.setdefault((c["length"], c["depth"]), []).append(c["accuracy"])
  return [{"length": l, "depth": d, "accuracy": float(np.mean(v))}
          for (l, d), v in sorted(cells.items())]


def pretrained_context(hf_dir: str, model, overrides: Mapping[str, Any]) -> int:
  """L of a loaded checkpoint: ``--train_len`` if given, else its original context."""
  from pejax.train import pretrained  # pylint: disable=g-import-not-at-top
  if "data.train_len" in overrides:
    return int(overrides["data.train_len"])
  original = pretrained.original_context(hf_dir, model)
  if original is None:
    raise ValueError(f"{hf_dir}/config.json has no max_position_embeddings: pass --train_len "
                     "(the context the model was trained at)")
  return original


def run_pretrained(options: study_options.StudyOptions, hf_dir: str, *,
                   log: Callable[[str], None] = print) -> Dict[str, Any]:
  """The zero-shot half of the study on a pretrained checkpoint (``--init_from_hf=DIR``)."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top
  from pejax import hf  # pylint: disable=g-import-not-at-top
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  from pejax.train import pretrained  # pylint: disable=g-import-not-at-top
  # launch.py prints a ConfigError as a one-line usage error.
  model, tokenizer = pretrained.load_checkpoint(hf_dir)
  try:
    L = pretrained_context(hf_dir, model, options.overrides)
  except ValueError as e:
    raise experiment_config.ConfigError(f"--init_from_hf={hf_dir}: {e}") from None
  multipliers = (1, 2) if options.quick else (1, 2, 4)
  lengths = [L * m for m in multipliers]
  examples = 4 if options.quick else 16
  depths = (0.0, 0.5, 1.0) if options.quick else DEPTHS
  label = pathlib.Path(hf_dir).resolve().name
  workdir = options.report_dir(STUDY)
  report = markdown_report.Report(f"Passkey retrieval beyond the original context of {label}: "
                               "zero-shot RoPE scalings", study=STUDY, options=options)
  report.indicative = f"one pretrained model, {examples} prompts per cell"
  report.decided_by = "a full run (16 prompts per cell, 5 depths, 1x-4x L)"
  try:  # The prompt must fit at L, or nothing is measured.
    from pejax.data import passkey_text  # pylint: disable=g-import-not-at-top
    passkey_text.passkey_text_example(tokenizer, length=L, depth=1.0, seed=0)
  except ValueError as e:
    raise experiment_config.ConfigError(
        f"the original context L={L} of {hf_dir} cannot hold the passkey prompt with its "
        f"tokenizer ({e}); pass --train_len=<a longer L>") from None
  log(f"{STUDY}: pretrained {hf_dir} ({model.config.num_layers} layers, d={model.config.d_model}"
      f"), original context L={L}; lengths {lengths}, depths {list(depths)}, {examples} prompts "
      "per cell")
  started = time.time()
  grids: Dict[str, List[Dict[str, Any]]] = {}
  base_scaling = model.config.pe.scaling
  for name in SCALINGS:
    cells = []
    for length in lengths:
      factor = max(1.0, length / L)
      if name == "none":
        scaled = model
      else:
        pe = scaled_pe_of(model, name, factor=factor, original=L)
        scaled = hf.with_rope_scaling(model, pe.scaling)
      for result in eval_lib.passkey_text_accuracy(
          scaled, tokenizer, lengths=[length], depths=depths, examples=examples,
          seed=int(options.seed_list((0,))[0]), progress=None):
        cell = result.to_json()
        cells.append({"length": cell["length"], "depth": cell["depth"],
                      "accuracy": cell["accuracy"], "status": cell["status"]})
      log(f"  {name:8s} at {length}: mean accuracy "
          f"{table_cells.fmt(mean_accuracy(cells, length), 2)}")
    grids[name] = cells
  spread = lambda value: seed_statistics.spread([value])
  numbers = {"at_L": spread(mean_accuracy(grids["none"], L)),
             "beyond": {n: spread(beyond(grids[n], L)) for n in SCALINGS},
             "ft_at": {}, "ft_beyond": {}}
  settings = Settings(train_len=L, seeds=(), multipliers=multipliers, recipe=convergence.Recipe(
      max_steps=1, check_every=1, check_examples=1, fit_threshold=RETRIEVES_AT_L),
      finetune_steps=0, depths=depths, examples=examples, finetune_scalings=())
  for v in verdicts(numbers, settings, subject=f"the pretrained {label}"):
    report.add_verdict(v)
  needed = sorted({c["status"] for g in grids.values() for c in g if c["status"] != "ok"})
  report.section("Setup", "\n".join([
      f"- model: {hf_dir} ({model.config.num_layers} layers, d_model {model.config.d_model}, "
      f"{model.config.num_heads} heads, vocab {model.config.vocab_size}); its own RoPE "
      f"{'without scaling' if base_scaling is None else type(base_scaling).__name__}",
      f"- original context L = {L}; each scaling rebuilt at factor = length / L with original "
      f"length L, the weights unchanged (no fine-tune: a pretrained model's training recipe is "
      "not ours to repeat)",
      f"- test: the natural-language passkey prompt (instruction, filler, key sentence at the "
      f"depth, question), tokenized with {tokenizer.name}; {examples} prompts per (length, "
      "depth) cell; accuracy = every answer token right under teacher forcing (= greedy)",
      f"- compute: {time.time() - started:.0f} s on this machine"]
      + ([f"- skipped cells: {', '.join(needed)}"] if needed else [])))
  header = ["scaling"] + [f"{l // L}x ({l})" for l in lengths] + ["mean > L"]
  rows = [[n] + [table_cells.fmt(mean_accuracy(grids[n], l), 2) for l in lengths]
          + [table_cells.median_cell(numbers["beyond"][n], 2)] for n in SCALINGS]
  report.table(header, rows, caption="**Zero-shot passkey accuracy by length** (mean over "
               "depths)")
  png = plot_heatmaps(workdir / "passkey_heatmaps.png", grids, lengths=lengths, depths=depths)
  report.image(png, "passkey accuracy heatmaps")
  results = {"pretrained": str(pathlib.Path(hf_dir).resolve()), "train_len": L,
             "lengths": lengths, "depths": list(depths), "examples": examples,
             "numbers": numbers, "zero_shot": grids}
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


def scaled_pe_of(model, name: str, *, factor: float, original: int):
  """A loaded model's RoPE config with scaling ``name`` at ``factor`` over ``original``."""
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  return decoder_from_config.with_rope_scaling(model.config.pe, name, factor=factor,
                                      original_max_position=original,
                                      head_dim=model.config.head_dim)


def run(options: study_options.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study and writes its report; returns the results written to JSON.

  With ``train.init_from_hf`` among the overrides (``--init_from_hf=DIR``), the zero-shot
  comparison runs on that pretrained checkpoint instead (:func:`run_pretrained`).
  """
  hf_dir = options.overrides.get("train.init_from_hf")
  if hf_dir:
    return run_pretrained(options, str(hf_dir), log=log)
  base = base_config(options)
  settings = settings or settings_for(options, base)
  runs_dir = options.kept_models_dir(STUDY)  # Records in git (no weights): resumable anywhere.
  workdir = options.report_dir(STUDY)
  report = markdown_report.Report("Passkey retrieval beyond the training length: zero-shot "
                               "scalings and short fine-tunes", study=STUDY, options=options)
  if options.quick or len(settings.seeds) < 2:
    report.indicative = (f"{len(settings.seeds)} seed, at most {settings.recipe.max_steps} "
                         "steps")
  log(f"{STUDY}: RoPE at L={settings.train_len} on stdlib + haystack passkeys, until retrieval "
      f">= {RETRIEVES_AT_L} at L or {settings.recipe.max_steps} steps; eval {settings.lengths}")
  per_seed = []
  for seed in settings.seeds:
    config = base.copy_and_resolve_references()
    with config.unlocked():
      config.seed = int(seed)
    per_seed.append(evaluate_seed(config, settings, runs_dir=runs_dir, log=log))
  L = settings.train_len
  spread = lambda values: seed_statistics.spread(list(values))
  # A seed whose base model never retrieved at L cannot judge a scaling (the point):
  # the numbers and tables are over the retrieving seeds (``judged``), when there is any.
  judged = [s for s in per_seed if s["base"].fit] or per_seed
  left_out = [seed for seed, s in zip(settings.seeds, per_seed) if not s["base"].fit]
  numbers = {
      "retrieving": {"n": sum(s["base"].fit for s in per_seed), "of": len(per_seed),
                     "left_out": left_out},
      "at_L": spread(mean_accuracy(s["zero_shot"]["none"], L) for s in judged),
      "beyond": {n: spread(beyond(s["zero_shot"][n], L) for s in judged)
                 for n in settings.scalings},
      "ft_at": {n: spread(mean_accuracy(s["finetuned"][n], settings.finetune_len)
                          for s in judged) for n in settings.finetune_scalings},
      "ft_beyond": {n: spread(beyond(s["finetuned"][n], settings.finetune_len)
                              for s in judged) for n in settings.finetune_scalings},
  }
  for v in verdicts(numbers, settings):
    report.add_verdict(v)
  bases = [s["base"] for s in per_seed]
  report.section("Setup", "\n".join([
      f"- model: RoPE decoder, {base.model.num_layers} layers, d_model {base.model.d_model}, "
      f"{base.model.num_heads} heads; AdamW lr {base.optim.learning_rate:g}, warm-up "
      f"{base.optim.warmup_steps}, "
      f"{'constant rate' if settings.recipe.decay == 'constant' else 'cosine decay over the cap'}"
      f", batch {base.data.batch_size} rows of L = {L}",
      f"- training: {settings.passkey_fraction:.0%} haystack passkey rows (key sentence at a "
      "random depth of a random chunk of stdlib text; only the key scored), the rest language "
      f"modelling; until held-out passkey accuracy at L >= {RETRIEVES_AT_L} (checked every "
      f"{settings.recipe.check_every} steps) or {settings.recipe.max_steps} steps",
      "- base models: " + "; ".join(
          f"seed {s}: " + (f"retrieves after {b.steps_to_fit} steps" if b.fit else
                           f"best {b.best_in_dist:.2f} at step {b.best_step}, stopped at "
                           f"{b.steps}") for s, b in zip(settings.seeds, bases)),
      f"- zero-shot: trained weights in a decoder rebuilt with each scaling at factor = length "
      f"/ L; fine-tunes: {settings.finetune_steps} steps at {settings.finetune_len} "
      f"({settings.finetune_multiplier}L) with the scaling at factor "
      f"{settings.finetune_multiplier} (same tokens per step), then scored at "
      f"{settings.finetune_len} and beyond",
      f"- test: {settings.examples} examples per (length, depth) cell, haystacks from the "
      "validation split; accuracy = whole key right (teacher forcing = greedy)",
      f"- compute: {len(bases)} base models, "
      f"{sum(b.train_seconds for b in bases) / 60:.1f} min of base training + "
      f"{sum(t.train_seconds for s in per_seed for t in s['finetunes'].values()) / 60:.1f} "
      "min of fine-tuning on this machine (original times for reused models)",
      "- tables and verdicts: median [min-max] over the seeds whose base model retrieves at L"
      + (f" (seed(s) {', '.join(map(str, left_out))} left out: no retrieval at L to extend)"
         if left_out and len(judged) < len(per_seed) else ""),
  ]))
  zs = {n: _mean_grid([s["zero_shot"][n] for s in judged]) for n in settings.scalings}
  header = ["scaling"] + [f"{l // L}x ({l})" for l in settings.lengths] + ["mean > L"]
  rows = [[n] + [table_cells.median_cell(spread(mean_accuracy(s["zero_shot"][n],
                                                              l) for s in judged), 2)
                 for l in settings.lengths] + [table_cells.median_cell(numbers["beyond"][n], 2)]
          for n in settings.scalings]
  report.table(header, rows, caption="**Zero-shot passkey accuracy by length** (mean over "
               "depths; median [min-max] over seeds)")
  ft_lengths = [l for l in settings.lengths if l >= settings.finetune_len]
  rows = [[f"{n} (fine-tuned)"] + [table_cells.median_cell(spread(mean_accuracy(s["finetuned"][n],
                                                                                l)
                                                      for s in judged), 2)
                                   for l in ft_lengths] for n in settings.finetune_scalings]
  report.table(["fine-tune"] + [f"{l // L}x ({l})" for l in ft_lengths], rows,
               caption=f"**After {settings.finetune_steps} fine-tuning steps at "
               f"{settings.finetune_len}** (plain RoPE fine-tuned without scaling = control)")
  png = plot_heatmaps(workdir / "passkey_heatmaps.png", zs, lengths=settings.lengths,
                      depths=settings.depths)
  report.image(png, "passkey accuracy heatmaps")
  results = {"settings": json.loads(json.dumps(dataclasses.asdict(settings), default=str)),
             "numbers": numbers, "zero_shot_mean_grids": zs,
             "per_seed": [{"base": s["base"].to_json(),
                           "finetunes": {n: t.to_json() for n, t in s["finetunes"].items()},
                           "zero_shot": s["zero_shot"], "finetuned": s["finetuned"]}
                          for s in per_seed]}
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch("passkey_scaling")
