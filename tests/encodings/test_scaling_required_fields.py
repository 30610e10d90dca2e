"""Every RoPE scaling names a missing required field before construction.

``from_fields`` is the path of flat config fields (``--rope_scaling=yarn``); before, a missing
``factor`` was a raw ``TypeError`` from the dataclass constructor, and LongRoPE without a factor
silently built an identity scaling (factor 1.0).
"""

from absl.testing import absltest
from absl.testing import parameterized

from pejax.encodings import rope_scaling


class RequiredFieldsTest(parameterized.TestCase):

  @parameterized.parameters(*rope_scaling.scaling_names())
  def test_missing_factor_is_named(self, name):
    cls = rope_scaling.scaling_class(name)
    with self.assertRaisesRegex(ValueError, rf"factor is required for the '{name}' scaling"):
      cls.from_fields({}, rotary_dim=16, train_len=64)

  @parameterized.parameters(*rope_scaling.scaling_names())
  def test_factor_alone_is_enough(self, name):
    scaling = rope_scaling.scaling_class(name).from_fields({"factor": 4.0}, rotary_dim=16,
                                                           train_len=64)
    self.assertEqual(getattr(scaling, "factor"), 4.0)

  def test_longrope_with_its_lists_needs_no_factor(self):
    scaling = rope_scaling.scaling_class("longrope").from_fields(
        {"long_factor": "1,2", "short_factor": "1,1"}, train_len=64)
    self.assertEqual(scaling.long_factor, (1.0, 2.0))


if __name__ == "__main__":
  absltest.main()
