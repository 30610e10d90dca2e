"""The import surface DESIGN.md promises exists and is documented."""

import inspect

from absl.testing import absltest

import pejax
import pejax.nn

# The public API list of ../shared/DESIGN.md.
DESIGN_NAMES = (
    "sinusoidal_table", "sinusoidal_embedding", "RopeConfig", "LinearScaling", "NTKScaling",
    "DynamicNTKScaling", "YaRNScaling", "Llama3Scaling", "LongRoPEScaling", "rope_inv_freq",
    "rope_config_from_hf", "rope_config_to_hf", "apply_rope", "alibi_slopes", "alibi_bias",
    "t5_relative_position_bucket", "randomized_positions", "LearnedPositionEmbedding",
    "T5RelativeBias",
)


class PublicApiTest(absltest.TestCase):

  def test_design_names_exist(self):
    for name in DESIGN_NAMES:
      self.assertTrue(hasattr(pejax, name), name)
    self.assertTrue(hasattr(pejax.nn, "Decoder"))
    self.assertTrue(hasattr(pejax.nn, "DecoderConfig"))

  def test_every_public_name_is_documented(self):
    self.assertEqual(len(set(pejax.__all__)), len(pejax.__all__))
    for name in pejax.__all__:
      if name == "__version__":
        continue
      obj = getattr(pejax, name)
      doc = inspect.getdoc(obj)
      self.assertTrue(doc and len(doc) > 20, f"{name} has no real docstring")

  def test_transforms_document_shapes_and_references(self):
    for name in ("apply_rope", "alibi_bias", "sinusoidal_table", "rope_inv_freq",
                 "t5_relative_position_bucket", "randomized_positions"):
      obj = getattr(pejax, name)
      module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
      doc = (inspect.getdoc(obj) or "") + module_doc
      self.assertIn("[", doc, f"{name}: no shapes documented")
      self.assertRegex(doc, r"arXiv|Press|Raffel|Vaswani|Su et al", f"{name}: no reference")

  def test_version(self):
    self.assertRegex(pejax.__version__, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
  absltest.main()
