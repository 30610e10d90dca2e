"""``python -m experiments.gallery [--quick]``: the positional encodings themselves, no training.

Six figures drawn from the public pejax functions, each with the property it illustrates and a
numerical check of that property (the verdicts of the report):

1. ``sinusoid_heatmap.png``: the sinusoidal table (positions x dims), ``pejax.sinusoidal_table``.
   Every row is distinct, and ``PE(i) . PE(i + k)`` depends on the offset ``k`` only.
2. ``sinusoid_similarity.png``: cosine similarity of ``PE(i)`` and ``PE(i + k)`` against ``k``.
   It decreases on average with distance (Spearman rank correlation), though not monotonically.
3. ``rope_decay.png``: RoPE's long-term decay. Left, the RoFormer upper bound
   ``(1 / (d/2)) sum_j |S_j|`` with ``S_j = sum_{i<j} exp(1j m theta_i)`` (RoFormer sec. 3.4.3,
   Fig. 2); right, ``q . k / d`` for ``q = k = 1`` rotated with ``pejax.apply_rope`` at distance m
   (the mean of ``cos(m theta_i)``). Base 10000 and the PI, NTK and YaRN scalings.
4. ``alibi_bias.png``: ALiBi's causal bias ``-slope_h (q - k)`` for a few heads; slopes
   geometric ``2^(-8 (h + 1) / H)``.
5. ``t5_buckets.png``: T5 relative position -> bucket, bidirectional and causal (HF T5
   arithmetic): exact small distances, log-spaced larger ones, saturation at ``max_distance``.
6. ``rope_frequency_ramps.png``: ``inv_freq`` ratio (scaled / original) and wavelength per
   dimension pair for PI, NTK, YaRN and Llama 3.1 scaling.

References:
  Vaswani et al. 2017, arXiv:1706.03762 (sinusoidal); Su et al. 2021, arXiv:2104.09864 (RoPE);
  Chen et al. 2023, arXiv:2306.15595 (PI); bloc97 2023 (NTK-aware); Peng et al. 2023,
  arXiv:2309.00071 (YaRN); Dubey et al. 2024, arXiv:2407.21783 (Llama 3.1 scaling); Press et al.
  2022, arXiv:2108.12409 (ALiBi); Raffel et al. 2020, arXiv:1910.10683 (T5 buckets).
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import dataclasses
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional

import jax.numpy as jnp
import numpy as np
from scipy import stats

from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import study_options
from pejax import encodings as pe_lib

STUDY = "gallery"


@dataclasses.dataclass(frozen=True)
class GallerySettings:
  """Sizes of the figures.

  Attributes:
    num_positions: rows of the sinusoid heatmap.
    sinusoid_dim: embedding dim of the sinusoid figures.
    similarity_distance: largest offset of the cosine-similarity curve.
    head_dim: RoPE head dim (RoFormer's decay figure uses 128).
    max_distance: largest distance of the RoPE decay curves.
    rope_factor: scaling factor of PI / NTK / YaRN in the decay figure.
    rope_original: original context of the YaRN scaling in the decay figure.
    alibi_heads: ALiBi heads H.
    alibi_len: ALiBi heatmap side.
    t5_range: T5 relative positions from ``-t5_range`` to ``t5_range``.
  """

  num_positions: int = 256
  sinusoid_dim: int = 128
  similarity_distance: int = 1024
  head_dim: int = 128
  max_distance: int = 16384
  rope_factor: float = 4.0
  rope_original: int = 2048
  alibi_heads: int = 8
  alibi_len: int = 32
  t5_range: int = 300


def settings_for(quick: bool) -> GallerySettings:
  """The full gallery, or a smaller one for ``--quick`` (both take seconds)."""
  if quick:
    return GallerySettings(num_positions=128, similarity_distance=512, max_distance=4096)
  return GallerySettings()


@dataclasses.dataclass(frozen=True)
class Check:
  """One numerical check of the property a figure illustrates.

  Attributes:
    figure: PNG file name.
    prop: the property, in words (with its source).
    criterion: the explicit test.
    measured: the numbers the test used, as text.
    held: whether the numbers pass the test.
    value: the main measured number (for results.json).
  """

  figure: str
  prop: str
  criterion: str
  measured: str
  held: bool
  value: float

  def to_verdict(self) -> expectations.Verdict:
    return expectations.Verdict(_cell(f"{self.prop} [{self.figure}]"), _cell(self.criterion),
                                _cell(self.measured), bool(self.held))


def _cell(text: str) -> str:
  """Text for a markdown table cell (a bare ``|`` would end the cell)."""
  return text.replace("|", "\\|")


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _save(fig, path: pathlib.Path) -> None:
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  _plt().close(fig)


def spearman(x: Any, y: Any) -> float:
  """Spearman rank correlation of two 1-D sequences."""
  return float(stats.spearmanr(np.asarray(x, np.float64), np.asarray(y, np.float64))[0])


# ----------------------------------------------------------------------------------------------
# 1-2. Sinusoidal table.


def sinusoid_figures(s: GallerySettings, out: pathlib.Path) -> tuple[List[Check], Dict]:
  """Heatmap of the table and cosine similarity against distance, with their checks."""
  plt = _plt()
  table = np.asarray(pe_lib.sinusoidal_table(s.num_positions, s.sinusoid_dim), np.float64)
  fig, ax = plt.subplots(figsize=(7, 4))
  im = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
  ax.set_xlabel("embedding dim (even: sin, odd: cos; frequency falls with the dim)")
  ax.set_ylabel("position")
  ax.set_title(f"sinusoidal_table({s.num_positions}, {s.sinusoid_dim})")
  fig.colorbar(im, ax=ax)
  _save(fig, out / "sinusoid_heatmap.png")

  gram = table @ table.T  # [N, N]
  distances = np.sqrt(np.maximum(np.diag(gram)[:, None] + np.diag(gram)[None, :] - 2 * gram, 0))
  np.fill_diagonal(distances, np.inf)
  min_distance = float(distances.min())
  # Translation invariance: PE(i) . PE(i + k) = sum_j cos(k w_j) whatever i.
  n = s.num_positions
  deviation = 0.0
  for k in range(n):
    diag = np.diagonal(gram, offset=k)
    deviation = max(deviation, float(np.abs(diag - diag[0]).max()))
  checks = [
      Check("sinusoid_heatmap.png", "every position gets a distinct code (Vaswani et al. 2017)",
            "min ||PE(i) - PE(j)|| over i != j > 0.1",
            f"min distance {min_distance:.3f} over {n} positions", min_distance > 0.1,
            min_distance),
      Check("sinusoid_heatmap.png",
            "PE(i) . PE(i+k) depends on the offset k only (relative offsets are linear "
            "functions of the code; Vaswani et al. 2017)",
            "max |PE(i).PE(i+k) - PE(0).PE(k)| over i, k < 1e-3 (float32 table)",
            f"max deviation {deviation:.2e}", deviation < 1e-3, deviation),
  ]

  long_table = np.asarray(pe_lib.sinusoidal_table(s.similarity_distance + 1, s.sinusoid_dim),
                          np.float64)
  norms = np.linalg.norm(long_table, axis=-1)
  cosine = long_table @ long_table[0] / (norms * norms[0])  # [K + 1], offset k from position 0
  offsets = np.arange(s.similarity_distance + 1)
  rho = spearman(offsets, cosine)
  increases = int(np.sum(np.diff(cosine) > 0))
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.plot(offsets, cosine, linewidth=1)
  ax.set_xlabel("distance k")
  ax.set_ylabel("cos(PE(i), PE(i + k))")
  ax.set_title(f"sinusoidal PE similarity vs distance (dim {s.sinusoid_dim}); "
               f"Spearman rho {rho:.2f}")
  ax.grid(True, alpha=0.3)
  _save(fig, out / "sinusoid_similarity.png")
  checks.append(Check(
      "sinusoid_similarity.png",
      "cosine similarity of sinusoidal PEs decreases on average with distance",
      f"Spearman rho(distance, cosine) over k = 0..{s.similarity_distance} < -0.5",
      f"rho = {rho:.3f}; the curve is not monotone ({increases} of {len(offsets) - 1} steps "
      "go up)", rho < -0.5, rho))
  data = {"min_row_distance": min_distance, "translation_deviation": deviation,
          "cosine_spearman": rho, "cosine_increasing_steps": increases,
          "cosine_at": {str(k): float(cosine[k]) for k in (1, 10, 100, s.similarity_distance)}}
  return checks, data


# ----------------------------------------------------------------------------------------------
# 3. RoPE long-term decay.


def _rope_variants(s: GallerySettings) -> Dict[str, Optional[Any]]:
  f = s.rope_factor
  return {
      "base 10000": None,
      f"PI x{f:g}": pe_lib.LinearScaling(f),
      f"NTK x{f:g}": pe_lib.NTKScaling(f),
      f"YaRN x{f:g} (orig {s.rope_original})": pe_lib.YaRNScaling(f, s.rope_original),
  }


def roformer_bound(inv_freq: np.ndarray, distances: np.ndarray) -> np.ndarray:
  """RoFormer's relative upper bound of ``|q . R_m k|``: ``(1/(d/2)) sum_j |S_j|``.

  ``S_j = sum_{i < j} exp(1j m theta_i)`` for ``j = 1 .. d/2`` (Su et al. 2021, sec. 3.4.3).

  Args:
    inv_freq: ``[d/2]`` frequencies theta_i.
    distances: ``[M]`` relative distances m.

  Returns:
    ``[M]`` float64 bound.
  """
  angles = np.asarray(distances, np.float64)[:, None] * np.asarray(inv_freq, np.float64)[None]
  partial = np.cumsum(np.exp(1j * angles), axis=-1)  # [M, d/2] S_1 .. S_{d/2}
  return np.abs(partial).mean(axis=-1)


def rotated_dot(inv_freq: Any, distances: np.ndarray, *, head_dim: int,
                attention_factor: float = 1.0) -> np.ndarray:
  """``q . k / d`` for ``q = k = 1`` at positions ``m`` and 0, rotated with ``apply_rope``."""
  ones = jnp.ones((len(distances), 1, head_dim), jnp.float32)  # [M, H=1, D]
  q = pe_lib.apply_rope(ones, jnp.asarray(distances, jnp.int32), inv_freq, layout="half",
                        attention_factor=attention_factor)
  k = pe_lib.apply_rope(ones[:1], jnp.zeros((1,), jnp.int32), inv_freq, layout="half",
                        attention_factor=attention_factor)
  return np.asarray(jnp.sum(q * k, axis=(-1, -2)), np.float64) / head_dim


def rope_decay_figure(s: GallerySettings, out: pathlib.Path) -> tuple[List[Check], Dict]:
  """The decay curves of base RoPE and its scalings, with their checks."""
  plt = _plt()
  distances = np.unique(np.concatenate([
      np.arange(0, 256), np.round(np.geomspace(256, s.max_distance, 600)).astype(np.int64)]))
  curves, dots, freqs = {}, {}, {}
  for label, scaling in _rope_variants(s).items():
    config = pe_lib.RopeConfig(s.head_dim, scaling=scaling)
    inv_freq, factor = pe_lib.rope_inv_freq(config)
    freqs[label] = np.asarray(inv_freq, np.float64)
    curves[label] = roformer_bound(np.asarray(inv_freq), distances)
    dots[label] = rotated_dot(inv_freq, distances, head_dim=s.head_dim, attention_factor=factor)
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for label in curves:
    axes[0].plot(np.maximum(distances, 0.5), curves[label], label=label, linewidth=1)
    axes[1].plot(np.maximum(distances, 0.5), dots[label], label=label, linewidth=0.8)
  axes[0].set_title(f"RoFormer bound (1/(d/2)) sum_j |S_j|, d={s.head_dim}")
  axes[1].set_title("q.R(m)k / d for q = k = 1 (apply_rope, half layout)")
  for ax in axes:
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("relative distance m")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  axes[0].set_ylabel("relative upper bound")
  _save(fig, out / "rope_decay.png")

  labels = list(curves)
  base, pi, ntk, yarn = labels
  near = distances <= 1024
  rho = spearman(distances[near], curves[base][near])
  start, end = float(curves[base][0]), float(curves[base][distances <= 1024][-1])
  # PI divides every frequency by s, so its bound at s * m equals the base bound at m.
  f = s.rope_factor
  ms = distances[(distances * f <= s.max_distance)]
  pi_stretched = roformer_bound(freqs[pi], ms * f)
  pi_error = float(np.max(np.abs(pi_stretched - roformer_bound(freqs[base], ms))) / start)
  far = (distances >= s.rope_original // 4) & (distances <= s.rope_original * f)
  mean_far = {label: float(np.mean(curves[label][far])) for label in labels}
  dot_far = {label: float(np.mean(np.abs(dots[label][far]))) for label in labels}
  dot_rho = spearman(distances[near], dots[base][near])
  checks = [
      Check("rope_decay.png",
            "RoPE's q.k upper bound decays with relative distance (RoFormer sec. 3.4.3, Fig. 2)",
            "Spearman rho(distance, bound) over m = 0..1024 < -0.5 and bound(1024) < "
            "bound(0) / 4",
            f"rho = {rho:.3f}; bound(0) = {start:.2f}, bound(1024) = {end:.2f}",
            rho < -0.5 and end < start / 4, rho),
      Check("rope_decay.png",
            "the rotated q.k (q = k = 1) decays with distance, oscillating",
            "Spearman rho(distance, q.k/d) over m = 0..1024 < -0.5",
            f"rho = {dot_rho:.3f}", dot_rho < -0.5, dot_rho),
      Check("rope_decay.png",
            f"PI x{f:g} stretches the decay curve by its factor (all frequencies / s; "
            "Chen et al. 2023)",
            "max |bound_PI(s m) - bound_base(m)| / bound(0) < 1e-4",
            f"max relative error {pi_error:.2e}", pi_error < 1e-4, pi_error),
      Check("rope_decay.png",
            "NTK and YaRN lower the low frequencies, so the bound decays more slowly than base "
            "RoPE over the extended range",
            f"mean bound over m in [{s.rope_original // 4}, {int(s.rope_original * f)}]: "
            "NTK > base and YaRN > base",
            ", ".join(f"{k}: {v:.2f}" for k, v in mean_far.items()),
            mean_far[ntk] > mean_far[base] and mean_far[yarn] > mean_far[base],
            mean_far[ntk] / mean_far[base]),
  ]
  data = {"distances_sampled": int(len(distances)), "base_spearman": rho,
          "bound_at_0": start, "bound_at_1024": end, "pi_stretch_error": pi_error,
          "mean_bound_far": mean_far, "mean_abs_dot_far": dot_far, "dot_spearman": dot_rho}
  return checks, data


# ----------------------------------------------------------------------------------------------
# 4. ALiBi.


def alibi_figure(s: GallerySettings, out: pathlib.Path) -> tuple[List[Check], Dict]:
  """Bias heatmaps of a few heads, with their checks."""
  plt = _plt()
  h, n = s.alibi_heads, s.alibi_len
  positions = jnp.arange(n, dtype=jnp.int32)
  slopes = np.asarray(pe_lib.alibi_slopes(h), np.float64)
  bias = np.asarray(pe_lib.alibi_bias(positions, positions, pe_lib.alibi_slopes(h)), np.float64)
  q = np.arange(n)[:, None]
  k = np.arange(n)[None, :]
  expected = -slopes[:, None, None] * (q - k)[None]
  bias_error = float(np.max(np.abs(bias - expected)))
  paper = np.array([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)])
  slope_error = float(np.max(np.abs(slopes - paper) / paper))
  heads = sorted({0, h // 2 - 1, h - 1})
  fig, axes = plt.subplots(1, len(heads), figsize=(4.2 * len(heads), 3.6))
  masked = np.where(k > q, np.nan, bias)
  for ax, head in zip(np.atleast_1d(axes), heads):
    im = ax.imshow(masked[head], cmap="viridis", vmin=float(np.nanmin(masked[head])), vmax=0,
                   interpolation="nearest")
    ax.set_title(f"head {head}: slope {slopes[head]:.4g}")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    fig.colorbar(im, ax=ax, fraction=0.046)
  fig.suptitle(f"ALiBi causal bias -slope (q - k), H = {h}, own color scale per head "
               "(future keys masked)")
  _save(fig, out / "alibi_bias.png")
  ratios = slopes[1:] / slopes[:-1]
  checks = [
      Check("alibi_bias.png", "ALiBi's bias is linear in the distance: -slope_h (q - k) "
            "(Press et al. 2022)", "max |bias - (-slope_h (q - k))| < 1e-5",
            f"max error {bias_error:.1e}", bias_error < 1e-5, bias_error),
      Check("alibi_bias.png", f"slopes are geometric 2^(-8 (h+1) / H) for H = {h}, so each head "
            "has its own recency window", "max relative error vs the formula < 1e-6 and "
            "slopes strictly decreasing",
            f"max relative error {slope_error:.1e}; slope ratios {ratios.min():.4f}.."
            f"{ratios.max():.4f}", slope_error < 1e-6 and bool(np.all(ratios < 1)),
            slope_error),
  ]
  return checks, {"slopes": slopes.tolist(), "bias_error": bias_error,
                  "slope_error": slope_error}


# ----------------------------------------------------------------------------------------------
# 5. T5 buckets.


def _direction_checks(rel: np.ndarray, buckets: np.ndarray, *, sign: int, exact: int,
                      max_distance: int) -> Dict[str, Any]:
  """Properties of one direction (keys before the query: sign -1; after: sign +1)."""
  mask = (rel * sign > 0) | ((rel == 0) & (sign < 0))
  distance = np.abs(rel[mask])
  order = np.argsort(distance)
  distance, b = distance[order], buckets[mask][order]
  small = distance < exact
  return {
      "exact": bool(len(np.unique(b[small])) == int(np.sum(small))),
      "monotone": bool(np.all(np.diff(b) >= 0)),
      "saturated": bool(len(np.unique(b[distance >= max_distance])) == 1
                        and b[distance >= max_distance][0] == b.max()),
      "saturation_starts": int(distance[b == b.max()].min()),
      "num_buckets": int(len(np.unique(b))),
      "num_exact": int(np.sum(small)),
      "widths": np.unique(b, return_counts=True)[1][:-1].tolist(),  # last one is open-ended
  }


def t5_figure(s: GallerySettings, out: pathlib.Path, *, num_buckets: int = 32,
              max_distance: int = 128) -> tuple[List[Check], Dict]:
  """Bucket of each relative position (both modes) and a causal query x key map."""
  plt = _plt()
  rel = np.arange(-s.t5_range, s.t5_range + 1)
  both = np.asarray(pe_lib.t5_relative_position_bucket(
      jnp.asarray(rel, jnp.int32), bidirectional=True, num_buckets=num_buckets,
      max_distance=max_distance))
  causal = np.asarray(pe_lib.t5_relative_position_bucket(
      jnp.asarray(rel, jnp.int32), bidirectional=False, num_buckets=num_buckets,
      max_distance=max_distance))
  n = 48
  grid = np.arange(n)
  rel_grid = grid[None, :] - grid[:, None]  # key - query
  causal_map = np.asarray(pe_lib.t5_relative_position_bucket(
      jnp.asarray(rel_grid, jnp.int32), bidirectional=False, num_buckets=num_buckets,
      max_distance=max_distance)).astype(np.float64)
  causal_map[rel_grid > 0] = np.nan
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  axes[0].step(rel, both, where="mid", label="bidirectional", linewidth=1)
  axes[0].step(rel, causal, where="mid", label="causal", linewidth=1)
  axes[0].axvline(-max_distance, color="gray", linestyle=":")
  axes[0].axvline(max_distance, color="gray", linestyle=":", label="+-max_distance")
  axes[0].set_xlabel("relative position (key - query)")
  axes[0].set_ylabel("bucket")
  axes[0].set_title(f"T5 buckets (num_buckets {num_buckets}, max_distance {max_distance})")
  axes[0].legend(fontsize=7)
  axes[0].grid(True, alpha=0.3)
  im = axes[1].imshow(causal_map, cmap="viridis", interpolation="nearest")
  axes[1].set_title(f"causal bucket map, {n} positions")
  axes[1].set_xlabel("key position")
  axes[1].set_ylabel("query position")
  fig.colorbar(im, ax=axes[1])
  _save(fig, out / "t5_buckets.png")

  results = {
      "bidirectional before": _direction_checks(rel, both, sign=-1, exact=num_buckets // 4,
                                                max_distance=max_distance),
      "bidirectional after": _direction_checks(rel, both, sign=1, exact=num_buckets // 4,
                                               max_distance=max_distance),
      "causal": _direction_checks(rel, causal, sign=-1, exact=num_buckets // 2,
                                  max_distance=max_distance),
  }
  future = np.unique(causal[rel > 0]).tolist()
  checks = []
  for name, r in results.items():
    log_widths = r["widths"][r["num_exact"]:]
    growth = spearman(np.arange(len(log_widths)), log_widths) if len(log_widths) > 2 else 0.0
    r["log_width_spearman"] = growth
    held = r["exact"] and r["monotone"] and r["saturated"] and growth > 0.8
    checks.append(Check(
        "t5_buckets.png",
        f"T5 buckets ({name}): one bucket per small distance, then log-spaced wider buckets, "
        "saturating (Raffel et al. 2020)",
        "small distances each in their own bucket; bucket non-decreasing with distance; all "
        f"|d| >= {max_distance} in the last bucket; widths of the wide buckets grow (Spearman "
        "rho(index, width) > 0.8)",
        f"exact {r['exact']}, monotone {r['monotone']}, saturated {r['saturated']} (last bucket "
        f"from |d| = {r['saturation_starts']}), {r['num_buckets']} buckets, widths "
        f"{r['widths']} (rho {growth:.2f})", held, growth))
  checks.append(Check(
      "t5_buckets.png", "causal T5 puts every future key in bucket 0 (masked anyway)",
      "set of buckets of relative positions > 0 == {0}", f"{future}", future == [0],
      float(len(future))))
  return checks, results


# ----------------------------------------------------------------------------------------------
# 6. Frequency ramps of the scalings.


def ramp_figure(s: GallerySettings, out: pathlib.Path, *, head_dim: int = 128,
                base: float = 500000.0, factor: float = 8.0,
                original: int = 8192) -> tuple[List[Check], Dict]:
  """inv_freq ratio and wavelength per dimension pair for PI, NTK, YaRN and Llama 3.1."""
  del s
  plt = _plt()
  llama = pe_lib.Llama3Scaling(factor, 1.0, 4.0, original)
  yarn = pe_lib.YaRNScaling(factor, original)
  variants = {"PI": pe_lib.LinearScaling(factor), "NTK": pe_lib.NTKScaling(factor),
              "YaRN": yarn, "Llama 3.1": llama}
  original_freq = np.asarray(pe_lib.rope_inv_freq(pe_lib.RopeConfig(head_dim, base=base))[0],
                             np.float64)
  ratios = {}
  for label, scaling in variants.items():
    inv, _ = pe_lib.rope_inv_freq(pe_lib.RopeConfig(head_dim, base=base, scaling=scaling))
    ratios[label] = np.asarray(inv, np.float64) / original_freq
  idx = np.arange(head_dim // 2)
  wavelength = 2 * np.pi / original_freq
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for label, r in ratios.items():
    axes[0].plot(idx, r, label=label, linewidth=1.2)
    axes[1].plot(idx, wavelength / r, label=label, linewidth=1)
  axes[1].plot(idx, wavelength, "k--", label="original", linewidth=1)
  axes[0].axhline(1 / factor, color="gray", linestyle=":")
  axes[0].set_ylabel("inv_freq scaled / original")
  axes[0].set_title(f"frequency ratio (head_dim {head_dim}, base {base:g}, factor {factor:g})")
  axes[1].axhline(original, color="gray", linestyle=":", label=f"original context {original}")
  axes[1].axhline(original / 4, color="silver", linestyle=":", label="original / 4")
  axes[1].set_yscale("log")
  axes[1].set_ylabel("wavelength 2 pi / theta (tokens)")
  axes[1].set_title("wavelength per dimension pair")
  for ax in axes:
    ax.set_xlabel("dimension pair index i")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  _save(fig, out / "rope_frequency_ramps.png")

  checks = []
  pi_error = float(np.max(np.abs(ratios["PI"] * factor - 1)))
  checks.append(Check("rope_frequency_ramps.png",
                      "PI divides every frequency by the factor (Chen et al. 2023)",
                      "max |ratio * s - 1| < 1e-6", f"max error {pi_error:.1e}",
                      pi_error < 1e-6, pi_error))
  ntk = ratios["NTK"]
  ntk_ok = (abs(ntk[0] - 1) < 1e-6 and abs(ntk[-1] * factor - 1) < 1e-4
            and bool(np.all(np.diff(ntk) < 0)))
  checks.append(Check("rope_frequency_ramps.png",
                      "NTK-aware scaling keeps the highest frequency and divides the lowest by "
                      "the factor, smoothly in between (bloc97 2023)",
                      "ratio[0] = 1, ratio[-1] = 1/s (1e-4), strictly decreasing",
                      f"ratio[0] = {ntk[0]:.6f}, ratio[-1] * s = {ntk[-1] * factor:.6f}",
                      ntk_ok, float(ntk[-1] * factor)))
  # YaRN: dims rotating more than beta_fast times over the original context are kept, fewer than
  # beta_slow times interpolated.
  rotations = original / wavelength
  y = ratios["YaRN"]
  fast, slow = rotations > yarn.beta_fast, rotations < yarn.beta_slow
  yarn_ok = (bool(np.all(np.abs(y[fast] - 1) < 1e-6))
             and bool(np.all(np.abs(y[slow] * factor - 1) < 1e-5))
             and bool(np.all(np.diff(y) <= 1e-7)))
  checks.append(Check("rope_frequency_ramps.png",
                      "YaRN keeps dims with > beta_fast = 32 rotations over the original context,"
                      " interpolates those with < beta_slow = 1, linear ramp between (Peng et al."
                      " 2023)",
                      "ratio = 1 on the first set, 1/s on the second (1e-5), non-increasing",
                      f"{int(fast.sum())} dims kept, {int(slow.sum())} interpolated, "
                      f"{int((~fast & ~slow).sum())} on the ramp", yarn_ok, float(fast.sum())))
  l = ratios["Llama 3.1"]
  high = wavelength < original / llama.high_freq_factor
  low = wavelength > original / llama.low_freq_factor
  mid = ~high & ~low
  llama_ok = (bool(np.all(np.abs(l[high] - 1) < 1e-6))
              and bool(np.all(np.abs(l[low] * factor - 1) < 1e-5))
              and bool(np.all((l[mid] < 1) & (l[mid] > 1 / factor)))
              and bool(np.all(np.diff(l) <= 1e-7)))
  checks.append(Check("rope_frequency_ramps.png",
                      "Llama 3.1 keeps wavelengths < original / 4, divides those > original / 1 "
                      "by the factor, smooth band between (Dubey et al. 2024)",
                      "ratio = 1, 1/s (1e-5) on those sets, strictly between on the band, "
                      "non-increasing",
                      f"{int(high.sum())} kept, {int(low.sum())} divided, {int(mid.sum())} "
                      "in the band", llama_ok, float(mid.sum())))
  every = np.concatenate(list(ratios.values()))
  checks.append(Check("rope_frequency_ramps.png",
                      "context-extension scalings only slow rotations down",
                      "every ratio <= 1 + 1e-6", f"max ratio {every.max():.6f}",
                      bool(every.max() <= 1 + 1e-6), float(every.max())))
  data = {label: r.tolist() for label, r in ratios.items()}
  data["wavelength"] = wavelength.tolist()
  return checks, data


# ----------------------------------------------------------------------------------------------
# Study entry points.

FIGURES: Dict[str, tuple[str, Callable[..., tuple[List[Check], Dict]]]] = {
    "sinusoid": ("Sinusoidal table and similarity", sinusoid_figures),
    "rope_decay": ("RoPE long-term decay (base and scaled)", rope_decay_figure),
    "alibi": ("ALiBi bias per head", alibi_figure),
    "t5": ("T5 relative-position buckets", t5_figure),
    "ramps": ("Frequency ramps of PI / NTK / YaRN / Llama 3.1", ramp_figure),
}

_FIGURE_TEXT = {
    "sinusoid": ("`pejax.sinusoidal_table(N, D)` as a heatmap (rows: positions; columns: even = "
                 "sin, odd = cos, wavelength growing geometrically with the column) and the "
                 "cosine similarity of two codes against their distance."),
    "rope_decay": ("Left: RoFormer's relative upper bound of |q . R_m k| (their Fig. 2), from "
                   "`pejax.rope_inv_freq`; right: q . k / d for q = k = all-ones vectors rotated "
                   "by `pejax.apply_rope` at positions m and 0 (includes YaRN's attention "
                   "factor). Symlog distance axis."),
    "alibi": "`pejax.alibi_bias(arange(L), arange(L), alibi_slopes(H))` for three heads.",
    "t5": ("`pejax.t5_relative_position_bucket` over relative positions (key - query), both "
           "modes, and the causal query x key map."),
    "ramps": ("`pejax.rope_inv_freq` of each scaling divided by the unscaled one, and the "
              "resulting wavelengths, per dimension pair (Llama 3.1 geometry: head dim 128, base "
              "500000, factor 8, original context 8192)."),
}

_PNGS = {"sinusoid": ("sinusoid_heatmap.png", "sinusoid_similarity.png"),
         "rope_decay": ("rope_decay.png",), "alibi": ("alibi_bias.png",),
         "t5": ("t5_buckets.png",), "ramps": ("rope_frequency_ramps.png",)}


def run(options: study_options.StudyOptions, *, settings: Optional[GallerySettings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Draws every figure, checks its property and writes the report.

  Args:
    options: the study options (only ``quick``, ``workdir`` and ``command`` matter: nothing is
      trained).
    settings: figure sizes; default :func:`settings_for` ``options.quick``.
    log: receives one line per figure.

  Returns:
    The results dict written to ``results.json`` (figure data, checks, verdicts).
  """
  settings = settings or settings_for(options.quick)
  out = options.report_dir(STUDY)
  out.mkdir(parents=True, exist_ok=True)
  report = markdown_report.Report("Gallery of positional encodings", study=STUDY, options=options)
  report.text("No training: each figure is drawn from pejax's public functions; the verdicts "
              "below check the property each figure illustrates, numerically.")
  results: Dict[str, Any] = {"settings": dataclasses.asdict(settings)}
  for key, (title, draw) in FIGURES.items():
    started = time.time()
    checks, data = draw(settings, out)
    results[key] = {"data": data, "checks": [dataclasses.asdict(c) for c in checks]}
    report.section(title, _FIGURE_TEXT[key])
    for png in _PNGS[key]:
      report.image(out / png, title)
    report.table(["property", "criterion", "measured", "verdict"],
                 [[_cell(c.prop), _cell(c.criterion), _cell(c.measured),
                   expectations.HELD if c.held else expectations.NOT_HELD] for c in checks],
                 align="llll")
    for c in checks:
      report.add_verdict(c.to_verdict())
    log(f"gallery: {title}: {sum(c.held for c in checks)}/{len(checks)} checks held "
        f"({time.time() - started:.1f}s)")
  results["verdicts"] = [v.to_json() for v in report.verdicts]
  path = report.write(out, results)
  log(f"wrote {path}")
  return results


if __name__ == "__main__":
  study_options.run_as_launch("gallery")
