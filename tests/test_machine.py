"""Tests of pejax.machine: the one-line description of the machine a result comes from."""

from __future__ import annotations

import pathlib

from absl.testing import absltest

from pejax import machine


class MachineTest(absltest.TestCase):

  def test_cpu_model_names_the_family_of_a_generic_name(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "cpuinfo"
    path.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n"
                    "model\t\t: 2\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n"
                    "model name\t: AMD EPYC\n")
    self.assertEqual(machine.cpu_model(str(path)), "AMD EPYC (family 26, model 2)")
    path.write_text("model name\t: Some CPU\n")
    self.assertEqual(machine.cpu_model(str(path)), "Some CPU")
    self.assertIn("cores, jax", machine.describe_machine())


if __name__ == "__main__":
  absltest.main()
