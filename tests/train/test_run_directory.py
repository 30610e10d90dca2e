"""pejax.train.run_directory: a run's identity (directory name, fixed training settings) does not
move when the experiment config gains a model field at its neutral value."""

from __future__ import annotations

from absl.testing import absltest

from pejax import experiment_config
from pejax.train import run_directory


class RunIdentityTest(absltest.TestCase):

  def test_runs_recorded_before_a_later_field_keep_their_name_and_settings(self):
    config = experiment_config.get_default_config()
    earlier = config.to_dict()
    for name in experiment_config.LATER_MODEL_FIELDS:
      earlier["model"].pop(name)  # A config.json written before the field existed.
    self.assertEqual(run_directory.training_differences(earlier, config), [])
    # The default run's directory as named before the later fields (commit f5885a6).
    self.assertEqual(run_directory.run_name(config), "rope-L128-stdlib-837e17")

  def test_a_later_field_set_to_something_else_is_a_new_run(self):
    config = experiment_config.get_default_config()
    default_name = run_directory.run_name(config)
    config.model.chunk_size = "64"
    self.assertNotEqual(run_directory.run_name(config), default_name)
    earlier = experiment_config.get_default_config().to_dict()
    earlier["model"].pop("chunk_size")
    self.assertEqual(run_directory.training_differences(earlier, config),
                     ["model.chunk_size: run has '<missing>', this command has '64'"])

  def test_later_fields_are_in_the_default_config_at_their_neutral_value(self):
    model = experiment_config.get_default_config().model
    for name, value in experiment_config.LATER_MODEL_FIELDS.items():
      self.assertEqual(model[name], value, name)


if __name__ == "__main__":
  absltest.main()
