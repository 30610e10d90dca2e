"""Mesh specs, fit checks, logical axes, annotations and batch sharding (one process, 1 device)."""

from __future__ import annotations

import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
import numpy as np

from pejax import data as data_lib
from pejax import decoder_from_config
from pejax import experiment_config
from pejax import parallel
from pejax.nn import Decoder, DecoderConfig
from pejax.nn.positional import LearnedConfig
from pejax.train import run_mesh

FITTING = dict(batch_size=8, num_heads=4, num_kv_heads=2, d_model=32, mlp_hidden=64,
               vocab_size=256)


class MeshSpecTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("data_model", "data=4,model=2", 8, {"data": 4, "fsdp": 1, "model": 2}),
      ("empty_is_all_data", "", 8, {"data": 8, "fsdp": 1, "model": 1}),
      ("minus_one", "model=2,data=-1", 8, {"data": 4, "fsdp": 1, "model": 2}),
      ("fsdp", " fsdp=2 , data=2 ", 4, {"data": 2, "fsdp": 2, "model": 1}),
      ("one_device", "", 1, {"data": 1, "fsdp": 1, "model": 1}),
  )
  def test_parse(self, spec, devices, expected):
    self.assertEqual(parallel.parse_mesh_spec(spec, devices), expected)

  @parameterized.named_parameters(
      ("wrong_product", "data=3", 8, "needs 3 devices but 8"),
      ("unknown_axis", "tensor=2", 8, "axis in"),
      ("not_int", "data=four", 8, "integer size"),
      ("two_free", "data=-1,model=-1", 8, "at most one"),
      ("repeated", "data=2,data=4", 8, "twice"),
      ("zero", "data=0", 8, "size >= 1"),
      ("free_not_dividing", "model=3,data=-1", 8, "not a multiple"),
  )
  def test_parse_errors(self, spec, devices, message):
    with self.assertRaisesRegex(ValueError, message):
      parallel.parse_mesh_spec(spec, devices)

  def test_make_mesh_has_all_axes_auto(self):
    mesh = parallel.make_mesh("")
    self.assertEqual(mesh.axis_names, parallel.MESH_AXES)
    self.assertEqual(dict(mesh.shape), {"data": jax.device_count(), "fsdp": 1, "model": 1})
    self.assertTrue(mesh.are_all_axes_auto)


class MeshFitTest(parameterized.TestCase):

  def test_fitting_mesh_passes(self):
    parallel.check_mesh_fits({"data": 2, "fsdp": 2, "model": 2}, **FITTING)

  @parameterized.named_parameters(
      ("heads", {"model": 3}, {}, r"num_heads \(4\) must be divisible by the mesh axis model=3"),
      ("kv_heads", {"model": 4}, {}, r"num_kv_heads \(2\)"),
      ("batch", {"data": 4}, {"batch_size": 6}, r"batch_size \(6\) must be divisible"),
      ("batch_fsdp", {"data": 2, "fsdp": 4}, {"batch_size": 4}, r"data\*fsdp=2\*4=8"),
      ("d_model", {"fsdp": 8}, {"batch_size": 16, "d_model": 36}, r"d_model \(36\)"),
      ("vocab", {"model": 4}, {"num_kv_heads": 4, "vocab_size": 258}, r"vocab_size \(258\)"),
      ("processes", {}, {"batch_size": 6, "num_processes": 4}, "number of processes"),
  )
  def test_mesh_that_does_not_divide_fails_clearly(self, axes, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      parallel.check_mesh_fits(axes, **{**FITTING, **overrides})

  def test_experiment_reports_a_mesh_that_does_not_divide_the_heads(self):
    config = experiment_config.get_default_config()
    config.model.num_heads = 4
    model_config = decoder_from_config.decoder_config_from(config)
    with mock.patch.object(jax, "device_count", return_value=3):
      config.mesh.spec = "model=3"
      with self.assertRaisesRegex(experiment_config.ConfigError, r"'model=3'.*num_heads \(4\)"):
        run_mesh.make_run_mesh(config, model_config)
      config.mesh.spec = "data=3"
      with self.assertRaisesRegex(experiment_config.ConfigError, r"batch_size \(16\)"):
        run_mesh.make_run_mesh(config, model_config)

  def test_experiment_without_spec_on_one_device_has_no_mesh(self):
    config = experiment_config.get_default_config()
    if jax.device_count() == 1:
      self.assertIsNone(run_mesh.make_run_mesh(config, decoder_from_config.decoder_config_from(config)))


class LogicalAxesTest(parameterized.TestCase):

  def test_rules_golden(self):
    self.assertEqual(parallel.logical_to_mesh_spec(("batch", "length")),
                     P(("data", "fsdp"), None))
    self.assertEqual(parallel.logical_to_mesh_spec(("embed", "heads")), P("fsdp", "model"))
    self.assertEqual(parallel.logical_to_mesh_spec(("vocab", "embed")), P("model", "fsdp"))
    self.assertEqual(parallel.logical_to_mesh_spec(("mlp", None)), P("model", None))

  def test_unknown_logical_name_raises(self):
    with self.assertRaisesRegex(ValueError, "'channels' has no rule"):
      parallel.logical_to_mesh_spec(("channels",))

  def test_constrain_is_identity_without_mesh(self):
    x = jnp.ones((2, 3, 4, 5))
    self.assertIsNone(parallel.active_mesh())
    self.assertIs(parallel.constrain(x, (P.UNCONSTRAINED, None, "heads", None)), x)

  @parameterized.parameters(("rope", False), ("t5", True), ("learned", False))
  def test_decoder_parameters_are_annotated(self, pe, untied):
    pe = LearnedConfig(max_position=8) if pe == "learned" else pe
    config = DecoderConfig(pe=pe, num_layers=1, d_model=16, num_heads=2, vocab_size=32,
                           tie_embeddings=not untied)
    model = Decoder(config, rngs=nnx.Rngs(0))
    with nnx.logical_axis_rules(parallel.LOGICAL_AXIS_RULES):
      specs = nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))
    specs = {"/".join(map(str, path)): v.get_value() for path, v in specs}
    self.assertEqual(specs["embed/embedding"], P("model", "fsdp"))
    self.assertEqual(specs["blocks/0/attention/query/kernel"], P("fsdp", "model"))
    self.assertEqual(specs["blocks/0/attention/key/kernel"], P("fsdp", "model"))
    self.assertEqual(specs["blocks/0/attention/output/kernel"], P("model", "fsdp"))
    self.assertEqual(specs["blocks/0/mlp/up/kernel"], P("fsdp", "model"))
    self.assertEqual(specs["blocks/0/mlp/down/kernel"], P("model", "fsdp"))
    self.assertEqual(specs["final_norm/scale"], P())  # Replicated.
    if untied:
      self.assertEqual(specs["lm_head/kernel"], P("fsdp", "model"))
    pe_specs = {name: spec for name, spec in specs.items() if name.startswith("pes/")}
    for name, spec in pe_specs.items():  # PE tables are replicated.
      self.assertEqual(spec, P(), name)
    # The PE's parameters (learned table, T5 buckets) are found under pes/ and checked.
    has_params = bool(jax.tree.leaves(nnx.state(model.pes, nnx.Param)))
    self.assertEqual(bool(pe_specs), has_params)

  def test_partitioned_initializer_draws_the_same_values(self):
    init = nnx.initializers.normal(stddev=0.5)
    key = jax.random.key(3)
    param = nnx.Param(parallel.partitioned(init, ("embed", "heads"))(key, (4, 6), jnp.float32))
    np.testing.assert_array_equal(np.asarray(param[...]), np.asarray(init(key, (4, 6))))
    self.assertEqual(param.get_metadata()["out_sharding"], ("embed", "heads"))
    self.assertFalse(param.get_metadata()["eager_sharding"])  # No mesh needed to build it.


class BatchShardingTest(absltest.TestCase):

  def test_shard_batch_on_a_one_device_mesh_keeps_values(self):
    mesh = parallel.make_mesh("")
    batch = {"inputs": np.arange(24, dtype=np.int32).reshape(4, 6),
             "loss_mask": np.ones((4, 6), np.float32)}
    out = parallel.shard_batch(batch, mesh)
    for key, value in batch.items():
      np.testing.assert_array_equal(np.asarray(out[key]), value)
      self.assertEqual(out[key].sharding.spec, P(("data", "fsdp"), None))
    self.assertEqual(parallel.process_rows(parallel.batch_sharding(mesh), (4, 6)), slice(0, 4))

  def test_sharded_batches_pass_the_iterator_state_through(self):
    mesh = parallel.make_mesh("")
    inner = data_lib.SyntheticTaskIterator("copy", batch_size=2, seq_len=16, seed=1)
    batches = parallel.ShardedBatches(inner, mesh)
    next(batches)
    state = batches.get_state()
    second = next(batches)
    fresh = parallel.ShardedBatches(
        data_lib.SyntheticTaskIterator("copy", batch_size=2, seq_len=16, seed=1), mesh)
    fresh.set_state(state)
    np.testing.assert_array_equal(np.asarray(next(fresh)["inputs"]), np.asarray(second["inputs"]))
    self.assertEqual(state["step"], 1)


class _FakeSharding:
  """Stands in for a sharding of which this process holds the given row ranges."""

  def __init__(self, rows):
    self.rows = rows

  def addressable_devices_indices_map(self, shape):
    return {i: (slice(start, stop), slice(None)) for i, (start, stop) in enumerate(self.rows)}


class ProcessRowsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # 2 processes x 4 devices on data=4,model=2: devices 0-3 of process 1 hold rows 4..7.
      ("second_of_two", [(4, 6), (4, 6), (6, 8), (6, 8)], slice(4, 8)),
      ("first_of_four", [(0, 2), (0, 2)], slice(0, 2)),
      ("replicated", [(None, None)], slice(0, 8)),
  )
  def test_rows_of_this_process(self, rows, expected):
    self.assertEqual(parallel.process_rows(_FakeSharding(rows), (8, 16)), expected)

  def test_non_contiguous_rows_raise(self):
    with self.assertRaisesRegex(ValueError, "not contiguous"):
      parallel.process_rows(_FakeSharding([(0, 2), (4, 6)]), (8, 16))


class DistributedTest(absltest.TestCase):

  def test_single_process_is_a_no_op(self):
    with mock.patch.dict(os.environ, {}, clear=False):
      os.environ.pop("JAX_COORDINATOR_ADDRESS", None)
      self.assertFalse(parallel.initialize_distributed())
    self.assertTrue(parallel.is_coordinator())

  def test_bad_process_id_raises(self):
    with self.assertRaisesRegex(ValueError, "process_id"):
      parallel.initialize_distributed(num_processes=2, process_id=2)
    with self.assertRaisesRegex(ValueError, "num_processes"):
      parallel.initialize_distributed(num_processes=-1)


if __name__ == "__main__":
  absltest.main()
