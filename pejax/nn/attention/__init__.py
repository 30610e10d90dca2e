"""Softmax attention: one function, a table of kernels, one shared tile algebra.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA), D head dim.

* :mod:`~pejax.nn.attention.dispatch`: :func:`attention` (checks a call, picks the kernel) and
  the kernel table (:class:`Kernel`, :func:`register_kernel`).
* :mod:`~pejax.nn.attention.schedule`: the platform and the ``dense`` / ``blockwise`` choice.
* The shared algebra: :mod:`~pejax.nn.attention.core` (tile logits + bias + mask, the online
  softmax step and its VJP, written once), :mod:`~pejax.nn.attention.mask`,
  :mod:`~pejax.nn.attention.input_checks`.
* One module per kernel, each owning its ``serves`` / ``run`` and registering itself:
  :mod:`~pejax.nn.attention.cudnn` (CUDA), :mod:`~pejax.nn.attention.pallas` (+
  :mod:`~pejax.nn.attention.pallas_kernels`; the PE bias computed inside, CUDA / ROCm / TPU),
  :mod:`~pejax.nn.attention.logit_hook` (CoPE-style transforms of whole logit rows),
  :mod:`~pejax.nn.attention.blockwise` (O(L * tile) memory) and :mod:`~pejax.nn.attention.dense`.

Importing this package registers the built-in kernels.
"""

from pejax.nn.attention.dispatch import AttentionCall
from pejax.nn.attention.dispatch import Bias
from pejax.nn.attention.dispatch import Kernel
from pejax.nn.attention.dispatch import attention
from pejax.nn.attention.dispatch import kernel_bias_served
from pejax.nn.attention.dispatch import kernels
from pejax.nn.attention.dispatch import register_kernel
from pejax.nn.attention.dispatch import select_kernel
from pejax.nn.attention.dispatch import unregister_kernel
from pejax.nn.attention.mask import attention_mask
from pejax.nn.attention.schedule import ATTENTION_CHOICES
from pejax.nn.attention.schedule import IMPLEMENTATIONS
from pejax.nn.attention.schedule import choose_implementation
from pejax.nn.attention.schedule import platform
from pejax.nn.attention.schedule import target_platform
# The built-in kernels register themselves on import (highest priority first).
from pejax.nn.attention import cudnn  # pylint: disable=unused-import
from pejax.nn.attention.pallas import pallas_attention
from pejax.nn.attention.pallas import pallas_can_serve
from pejax.nn.attention import logit_hook  # pylint: disable=unused-import
from pejax.nn.attention.blockwise import blockwise_attention
from pejax.nn.attention.dense import causal_chunks
from pejax.nn.attention.dense import dense_attention

__all__ = [
    "ATTENTION_CHOICES",
    "AttentionCall",
    "Bias",
    "IMPLEMENTATIONS",
    "Kernel",
    "attention",
    "attention_mask",
    "blockwise_attention",
    "causal_chunks",
    "choose_implementation",
    "dense_attention",
    "kernel_bias_served",
    "kernels",
    "pallas_attention",
    "pallas_can_serve",
    "platform",
    "register_kernel",
    "select_kernel",
    "target_platform",
    "unregister_kernel",
]
