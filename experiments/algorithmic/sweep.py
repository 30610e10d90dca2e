"""The sweep of an algorithmic study: its tasks, PE variants, seeds and convergence recipe.

Variants: a PE registry name, or ``<pe>+randomized`` (Ruoss et al. 2023: training positions are
sorted samples of ``[0, max_position)``; at test time positions keep being sampled, the paper's
protocol, and plain ``0..k-1`` positions are scored too). NoPE, which ignores positions, is not
combined with randomization. A PE with a bounded table (learned absolute positions) gets
``max_position`` rows so that long tests can run at all (rows past the training length are
untrained unless positions are randomized).

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import ml_collections

from experiments.algorithmic import convergence
from experiments.study import pe_capabilities
from experiments.study import study_options


RANDOMIZED = "+randomized"


METRICS = {"exact_match": "exact match", "token_accuracy": "per-token accuracy"}  # Test metric
# of a study (Settings.metric) -> how reports name it. The fit check is always exact match.


ROW_BUCKETS = tuple(sorted({b * 2**k for b in (16, 24) for k in range(12)}))


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task of a study.

  Attributes:
    name: synthetic task name (``pejax.data.TASK_NAMES``).
    train_max: largest training size (the task's size unit, e.g. input length).
    test_sizes: sizes scored after training (training sizes among them give the
      in-distribution curve; larger ones are OOD).
    train_min: smallest training size.
    max_position: this task's own position range (randomized positions, rows of a bounded
      table); 0 means the study's (:attr:`Settings.position_range`). A task whose rows are much
      longer than the others' gets its own, so that joining a study does not change the other
      tasks' models (their configs, hence their records, stay the same).
    second_run: whether a model of this task that does not fit gets the second run
      (:attr:`Settings.rescue_steps`). False for a task whose in-distribution accuracy is itself
      a finding (a PE plateaus below the threshold, and a longer run would not change it):
      every model then trains to the first cap, fit or not.
  """

  name: str
  train_max: int
  test_sizes: tuple
  train_min: int = 1
  max_position: int = 0
  second_run: bool = True

  def __post_init__(self):
    if self.train_max < self.train_min:
      raise ValueError(f"train_max must be >= train_min ({self.train_min}), got "
                       f"{self.train_max}")
    if not self.test_sizes:
      raise ValueError(f"test_sizes of task {self.name!r} must not be empty")

  @property
  def ood_sizes(self) -> tuple:
    return tuple(s for s in self.test_sizes if s > self.train_max)


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep of one run of a study.

  Attributes:
    tasks: the :class:`TaskSpec` s.
    variants: variant labels.
    seeds: seeds per (task, variant).
    recipe: the convergence recipe.
    examples: test examples per size.
    max_position: range of randomized positions and rows of a bounded table; 0 means the
      longest test row.
    rescue_steps: the cap of a second run from scratch for a model that did not fit within
      ``recipe.max_steps`` (its cosine decay spans the new cap); 0 means no second run.
    metric: what the tests score per size (a :data:`METRICS` key): ``"exact_match"`` (the
      whole answer right) or ``"token_accuracy"`` (the fraction of answer bytes right, the
      metric of Ruoss et al. 2023). Fitting is judged by exact match either way.
    batched: train the seeds of a (task, variant) that still need training as one program
      (:mod:`experiments.algorithmic.batched_fit`; the same models to float32 tolerance, the
      same records) when ``True``, one model after another when ``False``; ``None``: as one
      program on an accelerator (GPU, TPU), one after another on CPU, where a step of the
      studies' model is compute-bound (its time grows linearly with the batch from 8 rows up)
      and N models as one program cost N steps or more (``benchmarks/studies_throughput.py``).
  """

  tasks: tuple
  variants: tuple
  seeds: tuple
  recipe: convergence.Recipe
  examples: int = 32
  max_position: int = 0
  rescue_steps: int = 0
  metric: str = "exact_match"
  batched: Optional[bool] = None

  def __post_init__(self):
    if self.metric not in METRICS:
      raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
    if self.rescue_steps and self.rescue_steps <= self.recipe.max_steps:
      raise ValueError(f"rescue_steps must be 0 or above the cap {self.recipe.max_steps}, got "
                       f"{self.rescue_steps}")

  @property
  def trains_together(self) -> bool:
    """Whether the seeds of a (task, variant) train as one program (``batched``, resolved)."""
    if self.batched is not None:
      return bool(self.batched)
    import jax  # pylint: disable=g-import-not-at-top
    return jax.default_backend() != "cpu"

  @property
  def metric_label(self) -> str:
    """``"exact match"`` or ``"per-token accuracy"``: the test metric as reports name it."""
    return METRICS[self.metric]

  @property
  def rescue_recipe(self) -> Optional[convergence.Recipe]:
    """The recipe of a second run, or ``None`` when there is none."""
    if not self.rescue_steps:
      return None
    return dataclasses.replace(self.recipe, max_steps=int(self.rescue_steps))

  @property
  def position_range(self) -> int:
    """The study's position range: ``max_position``, else the longest test row of the tasks
    without their own (of every task when all have one)."""
    if self.max_position:
      return int(self.max_position)
    shared = [t for t in self.tasks if not t.max_position] or list(self.tasks)
    return max(test_row_len(t.name, max(t.test_sizes)) for t in shared)

  def position_range_for(self, spec: TaskSpec) -> int:
    """``spec``'s own position range (``TaskSpec.max_position``), else the study's."""
    return int(spec.max_position) if spec.max_position else self.position_range


def parse_variant(variant: str) -> tuple:
  """``"rope+randomized"`` -> ``("rope", True)``; ``"alibi"`` -> ``("alibi", False)``."""
  if variant.endswith(RANDOMIZED):
    return variant[:-len(RANDOMIZED)], True
  return variant, False


def all_variants(base: ml_collections.ConfigDict, *, randomized: bool = True) -> tuple:
  """Every registered PE that can serve ``base`` (by capability), and its randomized variant."""
  names = pe_capabilities.runnable_pes(base)
  if not randomized:
    return names
  return names + tuple(n + RANDOMIZED for n in names if pe_capabilities.takes_position_ids(n))


def select_variants(settings: Settings, pes: Sequence[str]) -> Settings:
  """``settings`` restricted to the variants in ``pes`` (all of them when ``pes`` is empty).

  Args:
    settings: the study's sweep.
    pes: variant labels (``"rope"``, ``"rope+randomized"``), e.g. from ``--pes``.

  Returns:
    The settings with ``variants`` = those of ``pes``, in the study's order.

  Raises:
    study_options.StudyOptionError: naming a label the study does not sweep.
  """
  if not pes:
    return settings
  unknown = [p for p in pes if p not in settings.variants]
  if unknown:
    raise study_options.StudyOptionError(
        f"--pes: {', '.join(unknown)} not among this study's variants "
        f"({', '.join(settings.variants)})")
  return dataclasses.replace(settings, variants=tuple(v for v in settings.variants if v in pes))


def variant_config(base: ml_collections.ConfigDict, *, variant: str, seed: int,
                   max_position: int) -> ml_collections.ConfigDict:
  """``base`` with the variant's PE and the seed (a bounded table gets ``max_position`` rows).

  A randomized variant of a PE with a ``position_table`` (LieRE, ComRoPE) gets a table of
  ``max_position``: randomized positions lie in ``[0, max_position)``, every row has its own, and
  the rotations are then computed once per position value instead of once per row (the same
  numbers, ~9x faster to train).
  """
  pe, randomized = parse_variant(variant)
  config = base.copy_and_resolve_references()
  with config.unlocked():
    config.pe.name = pe
    config.seed = int(seed)
    config.data.train_len = max_position  # Learned tables default to data.train_len rows.
    cls = pe_capabilities.pe_class(pe)
    if (cls is not None and "max_position" in cls.config_class.field_types()
        and pe_capabilities.pe_max_length(config) is not None):
      config.pe.max_position = int(max_position)
    if (randomized and cls is not None
        and "position_table" in cls.config_class.field_types()):
      config.pe.position_table = int(max_position)
  return config


def test_row_len(task: str, size: int) -> int:
  """The bucketed row length that size ``size`` of ``task`` is scored in."""
  need = convergence.row_len_for(task, size)
  return next(b for b in ROW_BUCKETS if b >= need)


def second_run_cap(cap: int) -> int:
  """The second-run cap (``Settings.rescue_steps``) of the full modes: twice the first cap."""
  return 2 * int(cap)
