"""Training infrastructure: optimizer, train/eval steps, Orbax checkpoints, metrics, the loop,
many small models as one program (``ModelStack``)."""

from __future__ import annotations

from pejax.train.checkpoint import CHECKPOINT_SUBDIR
from pejax.train.checkpoint import CheckpointMismatchError
from pejax.train.checkpoint import Checkpointer
from pejax.train.checkpoint import RestoredCheckpoint
from pejax.train.checkpoint import config_differences
from pejax.train.checkpoint import config_to_dict
from pejax.train.config_check import check_config
from pejax.train.experiment import EXIT_CODES
from pejax.train.experiment import evaluate_run
from pejax.train.experiment import train_and_evaluate
from pejax.train.loop import NonFiniteLossError
from pejax.train.loop import TrainResult
from pejax.train.loop import train
from pejax.train.many import ModelStack
from pejax.train.stacked_batch import stack_batches
from pejax.train.metrics import METRICS_FILENAME
from pejax.train.metrics import MetricsWriter
from pejax.train.metrics import read_metrics
from pejax.train.optimizer import adamw_from_config
from pejax.train.optimizer import create_optimizer
from pejax.train.optimizer import schedule_from_config
from pejax.train.optimizer import warmup_cosine_schedule
from pejax.train.optimizer import weight_decay_mask
from pejax.train.progress import ProgressMeter
from pejax.train.progress import format_duration
from pejax.train.run_directory import final_numbers
from pejax.train.run_directory import is_finished
from pejax.train.run_directory import load_run_config
from pejax.train.run_directory import run_name
from pejax.train.run_directory import run_status
from pejax.train.signals import StopRequest
from pejax.train.train_step import bind_train_step
from pejax.train.train_step import evaluate_batches
from pejax.train.train_step import eval_step
from pejax.train.train_step import make_train_step
from pejax.train.train_step import masked_mean_loss
from pejax.train.train_step import masked_nll
from pejax.train.train_step import model_inputs

__all__ = [
    "CheckpointMismatchError",
    "check_config",
    "evaluate_run",
    "EXIT_CODES",
    "final_numbers",
    "is_finished",
    "load_run_config",
    "run_name",
    "run_status",
    "train_and_evaluate",
    "CHECKPOINT_SUBDIR",
    "Checkpointer",
    "METRICS_FILENAME",
    "MetricsWriter",
    "ModelStack",
    "NonFiniteLossError",
    "ProgressMeter",
    "RestoredCheckpoint",
    "StopRequest",
    "TrainResult",
    "adamw_from_config",
    "bind_train_step",
    "config_differences",
    "config_to_dict",
    "create_optimizer",
    "eval_step",
    "evaluate_batches",
    "format_duration",
    "make_train_step",
    "masked_mean_loss",
    "masked_nll",
    "model_inputs",
    "read_metrics",
    "schedule_from_config",
    "stack_batches",
    "train",
    "warmup_cosine_schedule",
    "weight_decay_mask",
]
