"""Evaluation: perplexity against length (two protocols), passkey retrieval, reports."""

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

__all__ = (
    "answer_exact_match",
    "answer_token_accuracy",
    "default_stride",
    "format_passkey_table",
    "format_table",
    "LengthResult",
    "passkey_accuracy",
    "PasskeyResult",
    "passkey_text_accuracy",
    "perplexity_at_lengths",
    "plot_loss",
    "plot_perplexity",
    "readable_log_ticks",
    "score_windows",
    "write_results",
)
