"""The experiment configuration: one ``ml_collections.ConfigDict`` for a whole run.

``launch.py`` loads a config file in the Flax-examples manner
(``--config=experiments/configs/x.py``, each a ``get_config()`` starting from
:func:`get_default_config`) and overrides fields with ``--config.model.num_layers=4``;
:func:`help_text` lists every field for ``--help``. Every layer below the entry point receives the
config object, never flags. Sub-configs nest: ``model``, ``pe``, ``data``, ``optim``, ``train``,
``eval``, ``mesh``. Zero / empty values mean "derive a sensible default" where the comment says so.
"""

from __future__ import annotations

import ml_collections

# Keys of the ``pe`` section that are not fields of a PE config.
PE_SECTION_KEYS = ("name", "randomized_max_position")


class ConfigError(ValueError):
  """A user-facing configuration error (``launch.py`` prints it as a usage line)."""


def pe_fields_by_name() -> dict:
  """``field -> (type, {pe name: default})`` over every registered PE (``--config.pe.<field>``).

  Returns:
    A dict from each flat PE-config field to its command-line type and the PEs that have it.
  """
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  fields: dict = {}
  for name in registry.pe_names():
    entry = registry.registry_entry(name)
    config_class = entry.pe_class.config_class
    defaults = entry.make_config().fields()
    for field, kind in config_class.field_types().items():
      if field in PE_SECTION_KEYS:
        raise ValueError(f"PE {name!r} has a field named {field!r}, reserved by the pe section")
      known = fields.setdefault(field, (kind, {}))
      if known[0] is not kind:
        raise ValueError(f"field {field!r} has type {kind.__name__} in PE {name!r} but "
                         f"{known[0].__name__} in {sorted(known[1])}")
      if field in defaults:
        known[1][name] = defaults[field]
  return fields


# Model fields added after runs were recorded, each with the value that keeps the earlier
# behaviour. A run's directory name and its fixed training settings leave a field out at this
# value (a config.json written before the field existed has no such key), so earlier runs keep
# their directories, resume and compare equal. Add a field here when it joins get_default_config.
LATER_MODEL_FIELDS = {
    "chunk_size": "",
    "qk_norm": "off",
    "query_scaling_floor": 0,
    "query_scaling_strength": 0.1,
}


def pe_section(name: str = "rope", **fields) -> ml_collections.ConfigDict:
  """The ``pe`` section of an experiment config: a name, its fields, every other PE's unset.

  Every field of every registered PE is present as a typed ``None`` ("the PE's default"), so
  that ``--config.pe.<field>=value`` reaches any PE, one registered from user code included;
  setting a field the chosen PE does not have is an error naming both (see
  :func:`pejax.decoder_from_config.pe_config_from`).

  Args:
    name: the PE's registry name (comma-separated names: a per-layer pattern).
    **fields: PE-config fields to set (e.g. ``base=500000.0``).

  Returns:
    A ``ConfigDict`` with ``name``, ``randomized_max_position`` and the PE fields.
  """
  section = ml_collections.ConfigDict()
  section.name = name  # Registry name(s): pejax.nn.pe_names(); "rope,none" cycles over layers.
  section.randomized_max_position = 0  # Ruoss et al. randomized positions; 0 disables.
  for field, (kind, _) in sorted(pe_fields_by_name().items()):
    section[field] = ml_collections.FieldReference(fields.pop(field, None), field_type=kind)
  if fields:
    raise ValueError(f"no registered PE has the field {sorted(fields)[0]!r}")
  return section


def get_default_config() -> ml_collections.ConfigDict:
  """Returns the default experiment: a ~0.4M-parameter decoder on the stdlib corpus.

  The defaults finish in a couple of minutes on 2 CPU cores and train well past unigram loss.

  Returns:
    A fresh, mutable ``ml_collections.ConfigDict`` (``seed``, ``workdir``, ``model``, ...) that
    command-line ``--config.<path>`` flags override.
  """
  config = ml_collections.ConfigDict()
  config.seed = 0  # PRNG seed for parameters and data order.
  config.workdir = ""  # Output directory; empty derives runs/<pe>-<timestamp>.
  config.pe_modules = ""  # --pe_module: modules / .py files that register user PEs, imported
  # before the run is built (a run records them, so that --eval_only and resume import them).

  config.model = ml_collections.ConfigDict()
  config.model.vocab_size = 256  # Byte-level vocabulary.
  config.model.num_layers = 2  # Number of decoder blocks.
  config.model.d_model = 128  # Residual stream width.
  config.model.num_heads = 4  # Query heads.
  config.model.num_kv_heads = 0  # Key/value heads for GQA; 0 means num_heads (plain MHA).
  config.model.mlp = "swiglu"  # "swiglu" or "gelu".
  config.model.mlp_ratio = 4.0  # Hidden width of the MLP relative to d_model.
  config.model.tie_embeddings = True  # Share input embedding and output projection.
  config.model.dtype = "float32"  # Compute dtype: "float32" or "bfloat16".
  config.model.attention = "auto"  # "dense", "blockwise" or "auto" (blockwise past a length).
  config.model.block_size = 512  # Tile size of blockwise attention.
  config.model.sliding_window = ""  # Local attention window W ("128"; "128,0" cycles over
  # layers, 0 = global); empty = global attention everywhere.
  config.model.chunk_size = ""  # Chunked local attention C (Llama 4: a query sees its own
  # chunk of C positions): "64"; "64,64,64,0" cycles over layers, 0 = none; empty = none.
  config.model.query_scaling = "none"  # "logn" (q * max(1, log n / log L)), "ssmax" or
  # "llama4" (attention temperature); "none,llama4" cycles over layers.
  config.model.query_scaling_floor = 0  # "llama4": floor scale F; 0 = Llama 4's 8192.
  config.model.query_scaling_strength = 0.1  # "llama4": attn_scale (Llama 4's 0.1).
  config.model.qk_norm = "off"  # Per-head QK-norm: "off", "on" (learned scale) or "l2"
  # (weightless, Llama 4); "l2,l2,l2,off" cycles over layers.

  config.pe = pe_section("rope")  # pe.name + every field of every registered PE (see below).

  config.data = ml_collections.ConfigDict()
  config.data.name = "stdlib"  # "stdlib", a synthetic task (copy, reverse, passkey, addition,
  # ...: pejax.data.TASK_NAMES) or a path to a UTF-8 text file or directory.
  config.data.train_len = 128  # Training sequence length in tokens (bytes).
  config.data.batch_size = 16  # Sequences per training batch.
  config.data.task_min_size = 0  # Smallest synthetic task size; 0 means the task minimum.
  config.data.task_max_size = 0  # Largest synthetic task size; 0 means what fits train_len.
  config.data.reverse_digits = False  # Addition written least-significant digit first.

  config.optim = ml_collections.ConfigDict()
  config.optim.learning_rate = 3e-3  # Peak learning rate of AdamW.
  config.optim.warmup_steps = 50  # Linear warm-up steps.
  config.optim.min_lr_ratio = 0.1  # Cosine decays to learning_rate * min_lr_ratio.
  config.optim.weight_decay = 0.1  # Decoupled weight decay (matrices only).
  config.optim.b1 = 0.9  # Adam beta1.
  config.optim.b2 = 0.98  # Adam beta2.
  config.optim.clip_norm = 1.0  # Global gradient-norm clipping.

  config.train = ml_collections.ConfigDict()
  config.train.steps = 600  # Total optimizer steps.
  config.train.log_every = 50  # Steps between progress lines.
  config.train.eval_every = 200  # Steps between validation losses.
  config.train.checkpoint_every = 200  # Steps between checkpoints.
  config.train.keep_checkpoints = 2  # Checkpoints kept on disk; 0 keeps all.
  config.train.resume = True  # Continue from the latest checkpoint in workdir if present.
  config.train.init_from = ""  # Workdir whose latest weights initialize a fresh run (fine-tune).
  config.train.init_from_hf = ""  # Local Hugging Face checkpoint: its architecture, weights and
  # tokenizer start the run (fine-tuning; model.* is then the checkpoint's, pe.scaling applies).
  config.train.tensorboard = True  # Also write TensorBoard events (if tensorboardX is installed).

  config.eval = ml_collections.ConfigDict()
  config.eval.lens = ""  # Comma-separated eval lengths; empty means 1,2,4,8,16 x train_len.
  config.eval.mode = "nonoverlap"  # "nonoverlap", "sliding" or "both" (ALiBi paper protocols).
  config.eval.num_tokens = 16384  # Validation tokens scored per length (capped by the split).
  config.eval.sliding_stride = 0  # Sliding stride; 0 = L/4 (scored tokens see >= 3L/4).
  config.eval.blockwise_threshold = 0  # Lengths above this use blockwise; 0 = the measured
  # crossover of the platform (pejax.nn.attention: 1024 on CPU).
  config.eval.rope_scaling = ""  # Zero-shot context extension at eval; empty keeps training's.
  config.eval.rope_factor = 0.0  # Factor of eval.rope_scaling; 0 means eval_len / train_len.
  config.eval.passkey = False  # Also report passkey accuracy by length and depth.
  config.eval.ruler = ""  # RULER tasks scored at every eval length ("all", or names such as
  # niah_single_1,vt: pejax.eval.ruler.task_names()); lengths in the model's tokens.
  config.eval.ruler_examples = 8  # Prompts per RULER task and length.

  config.mesh = ml_collections.ConfigDict()
  config.mesh.spec = ""  # "data=4,model=2" (axes data/fsdp/model); empty = all devices on data.
  config.mesh.distributed = False  # jax.distributed.initialize, cluster auto-detected (TPU, SLURM).
  config.mesh.coordinator_address = ""  # host:port of process 0; empty = environment / detect.
  config.mesh.num_processes = 0  # Processes of a multi-host run; 0 = detect.
  config.mesh.process_id = -1  # This process's index in [0, num_processes); -1 = detect.
  config.mesh.heartbeat_timeout_s = 100  # Seconds without heartbeat before a process is lost.
  return config


# Sections in --help order, with their titles; top-level fields (seed, workdir) go with "train".
HELP_GROUPS = (("model", "model"), ("pe", "positional encoding"), ("data", "data"),
               ("optim", "optimizer"), ("eval", "evaluation"), ("train", "run"), ("mesh", "mesh"))


def get_config() -> ml_collections.ConfigDict:
  """The default experiment (:func:`get_default_config`), as a ``--config`` file defines it.

  This module is the default ``--config`` file of ``pejax-launch`` / ``python -m pejax`` (an
  installed package has no ``experiments/configs/``); ``experiments/configs/default.py``, the
  default of ``launch.py``, returns the same.
  """
  return get_default_config()


def field_comments() -> dict:
  """``"model.d_model" -> "Residual stream width."``: the comment of every field.

  A field's comment starts on its line; comment-only lines right below it continue it (a
  comment too long for one line is never cut).
  """
  import inspect  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  comments = {}
  last = None
  for line in inspect.getsource(get_default_config).splitlines():
    match = re.match(r"\s*config\.([\w.]+) = .*?  # (.*)$", line)
    continued = re.match(r"\s*# (.*)$", line)
    if match:
      last = match.group(1)
      comments[last] = match.group(2).strip()
    elif continued and last is not None:
      comments[last] += " " + continued.group(1).strip()
    else:
      last = None
  return comments


def _pe_field_comments() -> dict:
  """``"pe.base" -> "rope: 10000.0"``: which PEs have each field, with their defaults."""
  comments = {"pe.name": "Registry name: " + ", ".join(_pe_names()) + " (a,b: per layer).",
              "pe.randomized_max_position": "Ruoss et al. randomized positions; 0 disables."}
  for field, (_, owners) in pe_fields_by_name().items():
    shown = "; ".join(f"{pe}: {default!r}" for pe, default in sorted(owners.items()))
    comments[f"pe.{field}"] = (f"Default per PE ({shown})." if shown else
                               "RoPE-scaling field (with --config.pe.scaling=<name>).")
  return comments


def _pe_names() -> tuple:
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  return registry.pe_names()


def help_text(config: ml_collections.ConfigDict | None = None) -> str:
  """Every config field with its default and comment, grouped by section (for ``--help``)."""
  config = get_default_config() if config is None else config
  comments = {**field_comments(), **_pe_field_comments()}
  lines = []
  for section, title in HELP_GROUPS:
    if section not in config:
      continue
    lines.append(f"{title} (--config.{section}.<field>):")
    ordered = [path.split(".", 1)[1] for path in comments if path.startswith(section + ".")]
    keys = [k for k in ordered if k in config[section]]
    keys += [k for k in config[section].keys() if k not in keys]  # Fields of a custom config.
    entries = [(f"{section}.{key}", config[section][key]) for key in keys]
    if section == "train":  # The top-level fields (seed, workdir, pe_modules).
      top = [k for k in config.keys() if not isinstance(config[k], ml_collections.ConfigDict)]
      top = [k for k in ("seed", "workdir") if k in top] + [
          k for k in top if k not in ("seed", "workdir")]
      entries = [(key, config[key]) for key in top] + entries
    for path, value in entries:
      shown = f"'{value}'" if isinstance(value, str) else repr(value)
      lines.append(f"  --config.{path}={shown}".ljust(46) + " " + comments.get(path, ""))
    lines.append("")
  return "\n".join(lines)
