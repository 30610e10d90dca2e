"""The 8x8 handwritten digits of scikit-learn, split and resized for the grid study.

``sklearn.datasets.load_digits`` ships inside scikit-learn (1797 grey-scale 8x8 images, 10
classes, pixel values 0..16): no download, the same bytes on every machine.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

UPSAMPLE_METHODS = ("nearest", "bilinear", "bicubic")


class DigitsSplit(NamedTuple):
  """Train / test images ``[n, 8, 8]`` float32 in ``[0, 1]`` and labels ``[n]`` int32."""
  train_images: np.ndarray
  train_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray


def load_digits_split(*, test_fraction: float = 0.2, seed: int = 0) -> DigitsSplit:
  """Loads the digits and splits them with a fixed permutation (stratification not needed).

  Args:
    test_fraction: fraction of the 1797 images held out, in (0, 1).
    seed: seed of the split permutation (the same split for every PE and model seed).

  Returns:
    A :class:`DigitsSplit`.

  Raises:
    ValueError: for ``test_fraction`` outside (0, 1).
    ImportError: if scikit-learn is not installed (``pip install scikit-learn``).
  """
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
  try:
    from sklearn import datasets  # pylint: disable=g-import-not-at-top
  except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("the image_grid study needs scikit-learn: pip install scikit-learn") from e
  digits = datasets.load_digits()
  images = (digits.images / 16.0).astype(np.float32)
  labels = digits.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(images))
  num_test = int(round(test_fraction * len(images)))
  test, train = order[:num_test], order[num_test:]
  return DigitsSplit(images[train], labels[train], images[test], labels[test])


def upsample(images: np.ndarray | jax.Array, factor: int, *, method: str = "bilinear"
             ) -> jax.Array:
  """Resizes ``[n, s, s]`` images to ``[n, factor * s, factor * s]`` with ``jax.image.resize``.

  Args:
    images: ``[n, s, s]`` float images.
    factor: integer upsampling factor >= 1 (1 returns the images unchanged).
    method: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.

  Returns:
    ``[n, factor * s, factor * s]`` float32.
  """
  if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
    raise ValueError(f"factor must be a positive integer, got {factor!r}")
  if method not in UPSAMPLE_METHODS:
    raise ValueError(f"method must be one of {list(UPSAMPLE_METHODS)}, got {method!r}")
  images = jnp.asarray(images, jnp.float32)
  if factor == 1:
    return images
  n, h, w = images.shape
  return jax.image.resize(images, (n, factor * h, factor * w), method=method)

