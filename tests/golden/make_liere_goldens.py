"""Writes tests/encodings/liere_goldens.json from the LieRE and ComRoPE authors' PyTorch code.

Run in a PyTorch environment (never a pejax dependency), with the two repositories fetched as
git directories (a bare mirror or a clone's ``.git``); the files are read at the pinned commits
below with ``git show`` and imported from a temporary directory, unmodified:

    python tests/golden/make_liere_goldens.py \
        --liere_git=/path/to/StanfordMIMI/LieRE/.git \
        --comrope_git=/path/to/Longin-Yu/ComRoPE/.git

Sources:
* LieRE: https://github.com/StanfordMIMI/LieRE at LIERE_COMMIT, ``models/rope_vit.py``:
  ``LierePositionEncoder`` (``phase_type="learned"``, per head, ``cls_token=False``) computes the
  rotations from its raw ``generator_raw_params`` and explicit positions (1-D, 2-D, 3-D), and
  ``FlexibleAttention.apply_transforms`` rotates a query tensor with them.
* ComRoPE: https://github.com/Longin-Yu/ComRoPE at COMROPE_COMMIT, ``model.py``:
  ``ComRoPEAPAttention``, ``ComRoPELDAttention`` and ``LieREAttention`` (its LieRE baseline,
  ``P - P^T``) give ``get_rotation_matrix()`` for 2-D and 3-D positions (the code supports no
  1-D), and the rotated query is ``R @ q`` as in their ``forward``.

Two imports of theirs are stubbed because nothing used here touches them: ``ipdb`` (a debugger,
imported by LieRE's modules) and ``torchvision.transforms`` (ComRoPE's image-augmentation
class). Inputs are drawn with a fixed numpy seed and rounded to float32 before use, so the JSON
holds exactly the values both sides compute from; outputs are float32 from torch (CPU).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch

LIERE_REPO = "StanfordMIMI/LieRE"
LIERE_COMMIT = "b27b41ba0d27331ec0774de852939c6d407889aa"
COMROPE_REPO = "Longin-Yu/ComRoPE"
COMROPE_COMMIT = "7aeef083f8af53479d0e86af562029bd89af6422"
OUT = pathlib.Path(__file__).resolve().parents[1] / "encodings" / "liere_goldens.json"


def _export(git_dir: str, commit: str, paths: list[str], target: pathlib.Path) -> None:
  for path in paths:
    text = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
                          check=True, capture_output=True).stdout
    out = target / path
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(text)


def _stub_unused_imports() -> None:
  sys.modules.setdefault("ipdb", types.ModuleType("ipdb"))
  torchvision = types.ModuleType("torchvision")
  transforms_module = types.ModuleType("torchvision.transforms")
  transforms_module.transforms = types.SimpleNamespace(Compose=type("Compose", (), {}))
  transforms_module.InterpolationMode = types.SimpleNamespace()
  torchvision.transforms = transforms_module
  sys.modules.setdefault("torchvision", torchvision)
  sys.modules.setdefault("torchvision.transforms", transforms_module)


def _f32(rng: np.random.RandomState, *shape, scale=1.0) -> np.ndarray:
  return (rng.standard_normal(shape) * scale).astype(np.float32)


def _listed(x) -> list:
  return np.asarray(x, np.float32).tolist()


def liere_cases(rope_vit) -> list[dict]:
  """LierePositionEncoder + FlexibleAttention.apply_transforms, 1-D / 2-D / 3-D."""
  rng = np.random.RandomState(0)
  cases = []
  # (name, axes, heads, block, tokens): head dim 64 (FlexibleAttention asserts it).
  for name, axes, heads, block, tokens in (("liere_1d", 1, 2, 8, 5), ("liere_2d", 2, 1, 4, 6),
                                           ("liere_3d", 3, 1, 8, 4)):
    head_dim = 64
    encoder = rope_vit.LierePositionEncoder(
        image_size=16, patch_size=4, dim=heads * head_dim, phase_type="learned",
        position_sequencing_type="sequential", heads=heads, input_dimensionality=axes,
        generator_dim=block, depth=1, rotary_embedding_per_layer=False,
        rotary_embedding_per_head=True, cls_token=False)
    blocks = head_dim // block
    # Their init, U[0, 2 pi), over [A, layers=1, H * M, b, b].
    raw = (rng.uniform(0.0, 2 * np.pi, (axes, 1, heads * blocks, block, block))
           .astype(np.float32))
    with torch.no_grad():
      encoder.generator_raw_params.copy_(torch.from_numpy(raw))
    # Their positions are floats in [0, 1] over the grid; use such values, in a random order.
    positions = rng.uniform(0.0, 1.0, (1, tokens, axes)).astype(np.float32)
    query = _f32(rng, 1, heads, tokens, head_dim)  # [B, H, N, D], their layout.
    with torch.no_grad():
      transforms = encoder(None, torch.float32, positions=torch.from_numpy(positions))
      attention = rope_vit.FlexibleAttention(dim=heads * head_dim, heads=heads,
                                             dim_head=head_dim, dropout=0.0,
                                             rotary_embedding_per_head=True)
      rotated = attention.apply_transforms(torch.from_numpy(query), transforms)
    cases.append({
        "name": name, "source": f"{LIERE_REPO}@{LIERE_COMMIT}", "variant": "liere",
        "parametrization": "upper_triangle",
        "generator_params": _listed(raw.reshape(axes, heads, blocks, block, block)),
        "positions": _listed(positions[0]), "query": _listed(query[0].transpose(1, 0, 2)),
        "rotated": _listed(rotated.numpy()[0].transpose(1, 0, 2)),
        "shapes": "generator_params [A, H, M, b, b], positions [N, A], query/rotated [N, H, D]",
    })
  return cases


def comrope_cases(model) -> list[dict]:
  """ComRoPE-AP, ComRoPE-LD and ComRoPE's LieRE baseline, 2-D and 3-D."""
  rng = np.random.RandomState(1)
  cases = []
  for name, kind, axes, heads, head_dim, block, tokens in (
      ("comrope_ap_2d", "comrope-ap", 2, 2, 16, 4, 6),
      ("comrope_ld_2d", "comrope-ld", 2, 2, 16, 4, 6),
      ("comrope_ld_3d", "comrope-ld", 3, 1, 24, 4, 5),
      ("comrope_liere_2d", "liere", 2, 1, 16, 8, 5)):
    config = model.CustomVITConfig(custom_pe_type=kind, hidden_size=heads * head_dim,
                                   num_attention_heads=heads, block_size=block, num_axes=axes,
                                   init_std=1.0, scale_factor=1.0)
    factory = {"comrope-ap": model.ComRoPEAPAttention, "comrope-ld": model.ComRoPELDAttention,
               "liere": model.LieREAttention}[kind]
    attention = factory(config)
    case = {"name": name, "source": f"{COMROPE_REPO}@{COMROPE_COMMIT}",
            "variant": {"comrope-ap": "comrope_ap", "comrope-ld": "comrope_ld",
                        "liere": "liere"}[kind],
            "parametrization": "difference"}
    with torch.no_grad():
      freqs = _f32(rng, *attention.freqs.shape)
      attention.freqs.copy_(torch.from_numpy(freqs))
      if kind == "comrope-ld":
        multiplier = _f32(rng, *attention.multiplier.shape)
        attention.multiplier.copy_(torch.from_numpy(multiplier))
        case["multipliers"] = _listed(multiplier.reshape(axes, -1))  # [A, M]
      if kind == "liere":  # freqs [H, A, M, b, b] -> ours [A, H, M, b, b].
        case["generator_params"] = _listed(freqs.transpose(1, 0, 2, 3, 4))
      else:  # freqs [H, 1, M, b, b] -> ours [H, M, b, b].
        case["generator_params"] = _listed(freqs[:, 0])
      # Their 2-D/3-D grids are (i + 0.5) / n in [0, 1]; random such values.
      positions = rng.uniform(0.0, 1.0, (1, tokens, axes)).astype(np.float32)
      attention.set_positions(torch.from_numpy(positions))
      rotation = attention.get_rotation_matrix()  # [B, N, H, D, D]
      query = _f32(rng, 1, tokens, heads, head_dim)
      rotated = torch.matmul(rotation, torch.from_numpy(query).unsqueeze(-1)).squeeze(-1)
    case.update({
        "positions": _listed(positions[0]), "query": _listed(query[0]),
        "rotated": _listed(rotated.numpy()[0]),
        "shapes": ("generator_params [H, M, b, b] (liere: [A, H, M, b, b]), multipliers [A, M],"
                   " positions [N, A], query/rotated [N, H, D]"),
    })
    cases.append(case)
  return cases


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--liere_git", required=True, help="git dir of StanfordMIMI/LieRE")
  parser.add_argument("--comrope_git", required=True, help="git dir of Longin-Yu/ComRoPE")
  parser.add_argument("--out", default=str(OUT))
  args = parser.parse_args()
  torch.set_default_dtype(torch.float32)
  _stub_unused_imports()
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    _export(args.liere_git, LIERE_COMMIT, ["models/vit.py", "models/rope_vit.py"],
            root / "liere")
    (root / "liere" / "models" / "__init__.py").write_text("")  # rope_vit imports .vit.
    _export(args.comrope_git, COMROPE_COMMIT, ["model.py"], root / "comrope")
    sys.path.insert(0, str(root / "liere"))
    rope_vit = importlib.import_module("models.rope_vit")
    sys.path.insert(0, str(root / "comrope"))
    comrope_model = importlib.import_module("model")
    cases = liere_cases(rope_vit) + comrope_cases(comrope_model)
  payload = {
      "about": ("LieRE / ComRoPE rotations from the authors' code (tests/golden/"
                "make_liere_goldens.py); float32, torch " + torch.__version__),
      "cases": cases,
  }
  text = json.dumps(payload, separators=(",", ":"))
  pathlib.Path(args.out).write_text(text + "\n")
  print(f"wrote {args.out}: {len(cases)} cases, {len(text) / 1024:.1f} KiB")


if __name__ == "__main__":
  main()
