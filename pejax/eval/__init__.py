"""Evaluation: perplexity against length (two protocols), passkey retrieval, task accuracy, reports.

A whole run's evaluation as its experiment config says, with its files, is
:mod:`pejax.eval.run_evaluation`; RULER's synthetic long-context tasks (generators and scorers)
are :mod:`pejax.eval.ruler`.
"""

from pejax.eval.exact_match import answer_exact_match
from pejax.eval.exact_match import answer_token_accuracy
from pejax.eval.passkey import passkey_accuracy
from pejax.eval.passkey import PasskeyResult
from pejax.eval.passkey import passkey_text_accuracy
from pejax.eval.perplexity import default_stride
from pejax.eval.perplexity import LengthResult
from pejax.eval.perplexity import perplexity_at_lengths
from pejax.eval.perplexity import score_windows
from pejax.eval.report import format_passkey_table
from pejax.eval.report import format_table
from pejax.eval.report import plot_loss
from pejax.eval.report import plot_perplexity
from pejax.eval.report import readable_log_ticks
from pejax.eval.report import write_results
from pejax.eval.task_accuracy import format_task_table
from pejax.eval.task_accuracy import task_accuracy_at_lengths
from pejax.eval.unigram_baseline import unigram_perplexity
from pejax.eval.validation_loss import validation_loss_fn

__all__ = (
    "answer_exact_match",
    "answer_token_accuracy",
    "default_stride",
    "format_passkey_table",
    "format_table",
    "format_task_table",
    "LengthResult",
    "passkey_accuracy",
    "PasskeyResult",
    "passkey_text_accuracy",
    "perplexity_at_lengths",
    "plot_loss",
    "plot_perplexity",
    "readable_log_ticks",
    "score_windows",
    "task_accuracy_at_lengths",
    "unigram_perplexity",
    "validation_loss_fn",
    "write_results",
)
