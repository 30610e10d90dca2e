"""rope_config_from_hf warns on (or, strict, rejects) rope keys its rope_type ignores."""

import json
import pathlib
import warnings

from absl.testing import absltest
from absl.testing import parameterized

from pejax.encodings import rope_hf

BASE = {"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000.0}


class UnknownRopeKeysTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("yarn_with_llama3_key", {"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 2048,
                                "low_freq_factor": 1.0}, ["low_freq_factor"]),
      ("misspelt_beta", {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 2048, "beta_fats": 16},
       ["beta_fats"]),
      ("linear_with_original", {"type": "linear", "factor": 2.0,
                                "original_max_position_embeddings": 2048},
       ["original_max_position_embeddings"]),
  )
  def test_unknown_keys_warn_and_strict_rejects(self, scaling, unknown):
    config = {**BASE, "rope_scaling": scaling}
    with self.assertWarnsRegex(rope_hf.UnknownRopeKeyWarning, str(unknown).replace("[", r"\[")):
      rope_hf.rope_config_from_hf(config)
    with self.assertRaisesRegex(ValueError, "does not use"):
      rope_hf.rope_config_from_hf(config, strict=True)
    new_form = {"head_dim": 64, "max_position_embeddings": 8192,
                "rope_parameters": {**scaling, "rope_theta": 10000.0}}
    with self.assertRaisesRegex(ValueError, "config rope_parameters has keys"):
      rope_hf.rope_config_from_hf(new_form, strict=True)

  def test_every_golden_config_is_clean(self):
    path = pathlib.Path(__file__).parent / "hf_rope_goldens.json"
    configs = [case["config"] for case in json.loads(path.read_text())["cases"].values()]
    self.assertLen(configs, 9)
    with warnings.catch_warnings():
      warnings.simplefilter("error", rope_hf.UnknownRopeKeyWarning)
      for config in configs:  # Real model configs (Llama 3, Qwen, Phi-3, ...): no warning.
        rope_hf.rope_config_from_hf(config)


if __name__ == "__main__":
  absltest.main()
