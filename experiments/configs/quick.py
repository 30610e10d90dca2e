"""A quick look (~30 s on 2 CPU cores): 200 steps at L=64, evaluated at 1-8 x 64 on 4096 tokens."""

from pejax import experiment_config


def get_config():
  config = experiment_config.get_default_config()
  config.data.train_len = 64  # Training sequence length (bytes).
  config.train.steps = 200  # Optimizer steps.
  config.train.log_every = 25  # Steps between progress lines.
  config.train.eval_every = 100  # Steps between validation losses.
  config.train.checkpoint_every = 100  # Steps between checkpoints.
  config.optim.warmup_steps = 20  # Linear warm-up steps.
  config.eval.lens = "64,128,256,512"  # Evaluation lengths: 1-8 x train_len.
  config.eval.num_tokens = 4096  # Validation tokens scored per length.
  return config
