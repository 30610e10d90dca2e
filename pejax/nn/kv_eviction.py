"""Slot algebra of the evicting KV caches: a ring buffer of recent tokens, plus attention sinks.

Axes: B batch, T slots, L new tokens, S sink slots, R = T - S ring slots.

Layout of a cache of T slots that has seen n tokens (text indices 0 .. n - 1):

* slots ``0 .. S - 1`` hold the first S tokens (the attention sinks; S = 0 for a plain window),
  written once and never evicted;
* slots ``S .. T - 1`` are a ring: token ``t >= S`` lives in slot ``S + (t - S) mod R``, so the
  ring holds the last ``min(n - S, R)`` tokens and each new token overwrites the oldest.

Attention reads the cache through a **chronological, right-aligned view**: the valid tokens in
text order occupy the last slots of a ``[T]`` gather (empty slots first, masked), and the L new
tokens follow at slots ``T .. T + L - 1``. Slot order is then text order with no gap between the
newest cached token and the new ones, so the attention mask's slot-based causality and sliding
window (:mod:`pejax.nn.attention.mask`) hold as in a full forward pass, and a content-aware PE
that continues a running sum from the newest cached slot (FoX) finds it at slot ``T - 1``.

References:
  Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks", arXiv 2309.17453
  (sinks + rolling cache, positions assigned within the cache); Beltagy et al. 2020, "Longformer",
  arXiv 2004.05150, and Jiang et al. 2023, "Mistral 7B", arXiv 2310.06825 (sliding-window
  attention decoded with a rolling buffer of W slots).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def chronological_view(length: jax.Array, *, capacity: int,
                       sink_tokens: int) -> tuple[jax.Array, jax.Array]:
  """Which slot each position of the right-aligned chronological view reads.

  Args:
    length: int32 scalar n, the tokens seen so far.
    capacity: T.
    sink_tokens: S (0 for a plain ring buffer).

  Returns:
    ``(source [T] int32, valid [T] bool)``: view position ``j`` shows slot ``source[j]`` when
    ``valid[j]`` (the valid positions are the last ``min(n, T)``, in text order).
  """
  ring = capacity - sink_tokens
  n = jnp.asarray(length, jnp.int32)
  sinks_filled = jnp.minimum(n, sink_tokens)
  ring_filled = jnp.clip(n - sink_tokens, 0, ring)
  valid_count = sinks_filled + ring_filled
  order = jnp.arange(capacity, dtype=jnp.int32) - (capacity - valid_count)  # Chronological index.
  valid = order >= 0
  oldest_ring_token = jnp.maximum(sink_tokens, n - ring)
  token = oldest_ring_token + (order - sinks_filled)
  ring_slot = sink_tokens + jnp.mod(token - sink_tokens, ring)
  source = jnp.where(order < sinks_filled, order, ring_slot)
  return jnp.where(valid, source, 0).astype(jnp.int32), valid


def written_slots(length: jax.Array, new_tokens: int, *, capacity: int,
                  sink_tokens: int) -> tuple[jax.Array, jax.Array]:
  """Which slots the next ``new_tokens`` tokens overwrite, and with which of them.

  Of L new tokens (text indices ``n .. n + L - 1``) only those still cached afterwards are
  written: the ones that fall in a sink slot, and the last ``R`` of the rest (each ring slot
  gets the latest token that maps to it).

  Args:
    length: int32 scalar n, the tokens seen before the new ones.
    new_tokens: L.
    capacity: T.
    sink_tokens: S.

  Returns:
    ``(written [T] bool, index [T] int32)``: slot ``s`` takes new token ``index[s]`` (in
    ``[0, L)``) where ``written[s]``, and keeps its content elsewhere.
  """
  ring = capacity - sink_tokens
  n = jnp.asarray(length, jnp.int32)
  end = n + new_tokens
  slot = jnp.arange(capacity, dtype=jnp.int32)
  sink_written = (slot < sink_tokens) & (slot >= n) & (slot < end)
  offset = slot - sink_tokens
  steps = end - 1 - sink_tokens - offset  # >= 0 iff some token up to end - 1 maps to the slot.
  latest = sink_tokens + offset + ring * jnp.floor_divide(jnp.maximum(steps, 0), ring)
  ring_written = (slot >= sink_tokens) & (steps >= 0) & (latest >= n)
  index = jnp.where(slot < sink_tokens, slot - n, latest - n)
  written = sink_written | ring_written
  return written, jnp.where(written, index, 0).astype(jnp.int32)


def gather_slots(array: jax.Array, source: jax.Array) -> jax.Array:
  """``array[:, source]`` for a ``[B, T, ...]`` array and ``[T']`` slot indices.

  Args:
    array: ``[B, T, ...]``.
    source: int32 ``[T']`` with values in ``[0, T)``.

  Returns:
    ``[B, T', ...]``.
  """
  return jnp.take(array, source, axis=1, mode="clip")


def write_slots(old: jax.Array, new: jax.Array, written: jax.Array,
                index: jax.Array) -> jax.Array:
  """Slot ``s`` of ``old [B, T, ...]`` replaced by ``new[:, index[s]]`` where ``written[s]``.

  Args:
    old: ``[B, T, ...]`` the cache array.
    new: ``[B, L, ...]`` the new tokens' entries (same trailing shape).
    written: bool ``[T]``.
    index: int32 ``[T]`` in ``[0, L)``.

  Returns:
    ``[B, T, ...]``.
  """
  taken = jnp.take(new, index, axis=1, mode="clip").astype(old.dtype)
  mask = written.reshape((1, -1) + (1,) * (old.ndim - 2))
  return jnp.where(mask, taken, old)
