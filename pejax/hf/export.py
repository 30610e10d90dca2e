r"""``python -m pejax.hf.export RUN OUT``: a trained run -> a Hugging Face checkpoint directory.

    python -m pejax.hf.export runs/rope-L128-stdlib-1a2b3c hf/rope-L128
    python -m pejax.hf.export RUN OUT --step 400 --model_type llama --dtype bfloat16

Writes into ``OUT``:

    config.json, model.safetensors   the decoder (:func:`pejax.hf.save_pretrained`;
                                     max_position_embeddings: the run's training length)
    tokenizer.json,                  the run's tokenizer: for byte-level runs a byte-level BPE
    tokenizer_config.json            with no merges whose id of each byte is pejax's (the byte
                                     value, 256 ids, no special tokens); for runs started from a
                                     Hugging Face checkpoint that checkpoint's tokenizer files
    generation_config.json           the stop / pad ids (none for byte-level runs)

so that transformers' ``AutoModelForCausalLM`` / ``AutoTokenizer`` load it to the same logits
and ids (tests/golden/check_hf_loads_saved.py), :func:`pejax.hf.from_pretrained` and
:func:`pejax.hf.load_tokenizer` read it back, and ``python launch.py --init_from_hf=OUT
--eval_only --data=... --eval_lens=...`` evaluates it.

launch.py's default model ties its embeddings and scales them by sqrt(d_model), which no
llama-family config expresses: it is written untied, the scale folded into the stored input
embedding (``model.embed_tokens.weight = W * sqrt(d_model)``, ``lm_head.weight = W``), with
identical logits; the printed summary says so. A run whose decoder no Hugging Face family
expresses (ALiBi, another non-RoPE PE, a GELU MLP, ...) is an error naming the field.

Usage errors (a directory that is not a run, a step without a checkpoint, an existing ``OUT``
with checkpoint files, without ``--overwrite``) are one line, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
from typing import Any, Optional, Sequence

from pejax import one_line_parser
from pejax import json_file
from pejax.hf import checkpoint_saving
from pejax.hf import safetensors_files as files_lib
from pejax.hf.tokenizer import ByteTokenizer
from pejax.train import run_loading

GENERATION_CONFIG_FILE = "generation_config.json"
# Tokenizer files copied from the Hugging Face checkpoint a run started from.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt",
                    "chat_template.jinja", GENERATION_CONFIG_FILE)
# What an export writes (an existing OUT holding any of them needs overwrite=True).
_WRITTEN = (files_lib.CONFIG_FILE, files_lib.WEIGHTS_FILE, files_lib.INDEX_FILE) + _TOKENIZER_FILES


@dataclasses.dataclass(frozen=True)
class ExportResult:
  """What :func:`export_run` wrote.

  Attributes:
    directory: the checkpoint directory (absolute).
    model_type: the Hugging Face family written.
    step: the run's checkpoint step.
    files: the file names written, sorted.
    notes: one line per change of form (untied and folded embeddings, the tokenizer).
    summary: the printed summary (several lines).
  """

  directory: str
  model_type: str
  step: int
  files: tuple[str, ...]
  notes: tuple[str, ...]
  summary: str


def _check_out(out: Any, overwrite: bool) -> str:
  if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
    raise ValueError(f"out must be a directory path, got {out!r}")
  directory = os.path.abspath(os.path.expanduser(os.fspath(out)))
  if os.path.exists(directory) and not os.path.isdir(directory):
    raise ValueError(f"out {os.fspath(out)!r} exists and is not a directory")
  existing = sorted(f for f in _WRITTEN if os.path.exists(os.path.join(directory, f)))
  if existing and not overwrite:
    raise ValueError(f"out {os.fspath(out)!r} already holds {', '.join(existing)}; choose "
                     "another directory or pass --overwrite")
  return directory


def _write_tokenizer(run: run_loading.LoadedRun, directory: str) -> tuple[list[str], str]:
  """The tokenizer files of ``run`` in ``directory``: ``(file names, a note)``."""
  hf_dir = str(run.config.train.get("init_from_hf", "") or "")
  if not hf_dir:
    files = ByteTokenizer().save(directory)
    json_file.write_text_atomic(os.path.join(directory, GENERATION_CONFIG_FILE), json.dumps(
        {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}, indent=2) + "\n")
    return files + [GENERATION_CONFIG_FILE], (
        "tokenizer: byte-level, id = byte value of the UTF-8 text (256 ids, no special tokens, "
        "as pejax's byte data)")
  copied = []
  for name in _TOKENIZER_FILES:
    source = os.path.join(hf_dir, name)
    if os.path.isfile(source):
      shutil.copyfile(source, os.path.join(directory, name))
      copied.append(name)
  if "tokenizer.json" not in copied:
    raise ValueError(f"the run started from {hf_dir}, which has no tokenizer.json to copy")
  return copied, f"tokenizer: copied from {hf_dir} ({', '.join(copied)})"


def export_run(workdir: Any, out: Any, *, step: Optional[int] = None,
               model_type: Optional[str] = None, dtype: Optional[str] = None,
               overwrite: bool = False) -> ExportResult:
  """Writes a run's decoder and tokenizer as a Hugging Face checkpoint directory.

  Args:
    workdir: the run directory (:func:`pejax.load_run`).
    out: the checkpoint directory to write (created).
    step: the run's checkpoint step; ``None`` for the latest.
    model_type: the Hugging Face family (``"llama"``, ...); ``None``: the family of the
      checkpoint the run started from, else the one the decoder's config implies.
    dtype: ``None`` (the run's parameter dtype), ``"float32"`` or ``"bfloat16"``.
    overwrite: replace checkpoint files already in ``out``.

  Returns:
    An :class:`ExportResult` (its ``summary`` is what the command prints).

  Raises:
    ValueError: naming the directory, step, argument or :class:`~pejax.nn.DecoderConfig`
      field that prevents the export (nothing is written then, except for a failure while
      writing the tokenizer files).
  """
  directory = _check_out(out, overwrite)
  run = run_loading.load_run(workdir, step=step)
  model, config = run.model, run.model.config
  family = checkpoint_saving.chosen_model_type(model, model_type)
  layout = checkpoint_saving.embedding_layout(config, family)
  hf_dir = str(run.config.train.get("init_from_hf", "") or "")
  scaling = getattr(config.pe, "scaling", None)
  # A run's context is its training length (the default rope has no length of its own); a
  # scaling writes its own, a fine-tuned checkpoint keeps its source's.
  context = None if hf_dir or scaling is not None else int(run.config.data.train_len)
  checkpoint_saving.save_pretrained(model, directory, model_type=family, dtype=dtype,
                                    max_position_embeddings=context)
  files, tokenizer_note = _write_tokenizer(run, directory)
  notes = []
  scale = math.sqrt(config.d_model)
  if layout.untie:
    notes.append(f"embeddings: the run's tied embedding W with its sqrt(d_model) = {scale:.4g} "
                 f"input scale is written untied: model.embed_tokens.weight = W * {scale:.4g} "
                 "(the scale folded in), lm_head.weight = W (same logits)")
  elif layout.fold_scale:
    notes.append(f"embeddings: the sqrt(d_model) = {scale:.4g} input scale is folded into "
                 "model.embed_tokens.weight (same logits)")
  notes.append(tokenizer_note)
  with open(os.path.join(directory, files_lib.CONFIG_FILE), encoding="utf-8") as f:
    written = json.load(f)
  stored = written.get("torch_dtype", written.get("dtype"))
  written_files = tuple(sorted({files_lib.CONFIG_FILE, files_lib.WEIGHTS_FILE, *files}))
  for stale in set(_WRITTEN) - set(written_files):  # A previous export's (with overwrite).
    if os.path.isfile(os.path.join(directory, stale)):
      os.remove(os.path.join(directory, stale))
  head = (f"wrote {directory}: {family} ({written['architectures'][0]}), "
          f"{config.num_layers} layers, d_model {config.d_model}, vocab {config.vocab_size}, "
          f"{stored}, from {run.workdir} step {run.step}")
  summary = "\n".join([head] + [f"  {line}" for line in notes]
                      + [f"  files: {', '.join(written_files)}"])
  return ExportResult(directory=directory, model_type=family, step=run.step,
                      files=written_files, notes=tuple(notes), summary=summary)


def main(argv: Sequence[str]) -> int:
  """``python -m pejax.hf.export RUN OUT [...]``: exports, prints the summary; 2 on a usage error.

  Args:
    argv: the arguments after the program name.

  Returns:
    The exit status (0).
  """
  parser = one_line_parser.OneLineErrorParser(prog="python -m pejax.hf.export",
                          description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="\n\n".join(__doc__.split("\n\n")[1:]))
  parser.add_argument("run", help="the run directory (launch.py --workdir)")
  parser.add_argument("out", help="the Hugging Face checkpoint directory to write")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  parser.add_argument("--model_type", default=None,
                      help="family to write (default: the run's source family, else inferred)")
  parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                      help="dtype of the stored tensors (default: the run's)")
  parser.add_argument("--overwrite", action="store_true",
                      help="replace checkpoint files already in OUT")
  args = parser.parse_args(list(argv))
  # The run's own PE modules (--pe_module), imported as --eval_only imports them.
  from pejax.cli import pe_modules  # pylint: disable=g-import-not-at-top
  from pejax.cli.command_line_error import CommandLineError  # pylint: disable=g-import-not-at-top
  try:
    pe_modules.import_recorded_pe_modules(args.run)
    result = export_run(args.run, args.out, step=args.step, model_type=args.model_type,
                        dtype=args.dtype, overwrite=args.overwrite)
  except (ValueError, CommandLineError) as e:
    parser.error(str(e))
  print(result.summary)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
