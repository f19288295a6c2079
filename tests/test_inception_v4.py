"""Inception V4: TF-Slim names and shapes, sizes, end points, heads, mixed precision."""
import pathlib

import keras
import numpy as np
import pytest

from common.contract.errors import ConfigError
from inception_finetune import inception_v4 as iv

# A copy of ../shared/fixtures/inception_v4_slim_variables.tsv: a checkpoint written by TF-Slim itself.
FIXTURE = pathlib.Path(__file__).parent / "data" / "inception_v4_slim_variables.tsv"
# Trainable parameters TF-Slim reports for the published network (fixture notes).
PARAMS_WITH_AUX = 46_009_106
PARAMS_WITHOUT_AUX = 42_649_769


def read_fixture_shapes():
  shapes = {}
  for line in FIXTURE.read_text().splitlines():
    name, shape = line.split("\t")
    shapes[name] = [int(size) for size in shape.strip("[]").split(",") if size.strip()]
  return shapes


def count_trainable(variables):
  return sum(int(np.prod(variable.shape)) for variable in variables)


@pytest.fixture(scope="module")
def model_299():
  return iv.inception_v4()


def test_variables_map_one_to_one_onto_slim_checkpoint(model_299):
  expected = read_fixture_shapes()
  assert len(expected) == 609
  expected.pop("global_step")  # the run's step, not a model variable
  names = {iv.slim_name(variable): list(variable.shape) for variable in model_299.weights}
  assert len(names) == len(model_299.weights)  # no two variables share a name
  assert names == expected


def test_parameter_counts_match_slim(model_299):
  assert count_trainable(model_299.trainable_variables) == PARAMS_WITH_AUX
  base_and_logits = [variable for variable in model_299.trainable_variables
                     if not iv.slim_name(variable).startswith("InceptionV4/AuxLogits")]
  assert count_trainable(base_and_logits) == PARAMS_WITHOUT_AUX


def test_layers_follow_slims_arg_scope(model_299):
  convs = [layer for layer in model_299.layers if isinstance(layer, keras.layers.Conv2D)]
  norms = [layer for layer in model_299.layers if isinstance(layer, keras.layers.BatchNormalization)]
  assert len(convs) == len(norms) == 151 and not any(conv.use_bias for conv in convs)
  assert all(bn.momentum == 0.9997 and bn.epsilon == 1e-3 and bn.center and not bn.scale
             and not bn.synchronized for bn in norms)
  decayed = iv.inception_v4(input_shape=(75, 75, 3), include_top=False, batch_norm_decay=0.9,
                            sync_batch_norm=True)
  assert {(layer.momentum, layer.synchronized) for layer in decayed.layers
          if isinstance(layer, keras.layers.BatchNormalization)} == {(0.9, True)}
  # Synchronized BatchNorm has the same variables: a TF-Slim checkpoint maps onto it as well.
  full = {iv.slim_name(variable): list(variable.shape) for variable in model_299.weights}
  assert all(full[iv.slim_name(variable)] == list(variable.shape) for variable in decayed.weights)


def test_end_point_shapes_at_299(model_299):
  expected = {
      "Conv2d_1a_3x3": (149, 149, 32), "Conv2d_2a_3x3": (147, 147, 32),
      "Conv2d_2b_3x3": (147, 147, 64), "Mixed_3a": (73, 73, 160), "Mixed_4a": (71, 71, 192),
      "Mixed_5a": (35, 35, 384), "Mixed_5e": (35, 35, 384), "Mixed_6a": (17, 17, 1024),
      "Mixed_6h": (17, 17, 1024), "Mixed_7a": (8, 8, 1536), "Mixed_7d": (8, 8, 1536),
      "global_pool": (1, 1, 1536), "PreLogitsFlatten": (1536,), "Logits": (1001,),
      "AuxLogits": (1001,),
  }
  for name, shape in expected.items():
    assert tuple(iv.end_point(model_299, name).shape[1:]) == shape, name
  logits, aux = model_299.outputs
  assert tuple(logits.shape) == (None, 1001) and tuple(aux.shape) == (None, 1001)


def test_blocks_are_in_network_order_and_cover_the_base(model_299):
  scopes = iv.block_scopes(len(iv.BLOCK_NAMES))
  assert scopes[0] == "InceptionV4/Conv2d_1a_3x3" and scopes[-1] == "InceptionV4/Mixed_7d"
  assert iv.block_scopes(2) == ["InceptionV4/Mixed_7c", "InceptionV4/Mixed_7d"]
  assert iv.block_scopes(0) == []
  first_index = []
  for variable in model_299.weights:
    name = iv.slim_name(variable)
    if name.startswith(iv.HEAD_SCOPES):
      continue
    owners = [index for index, scope in enumerate(scopes) if name.startswith(scope + "/")]
    assert len(owners) == 1, name
    if owners[0] not in first_index:
      first_index.append(owners[0])
  assert first_index == list(range(len(scopes)))  # blocks built in BLOCK_NAMES order


def test_block_scopes_rejects_unknown_blocks():
  with pytest.raises(ConfigError, match="Mixed_8a"):
    iv.block_scopes(["Mixed_7d", "Mixed_8a"])
  with pytest.raises(ConfigError, match="23"):
    iv.block_scopes(23)


@pytest.mark.parametrize("size, aux", [(74, False), (106, True)])
def test_too_small_input_is_a_config_error(size, aux):
  with pytest.raises(ConfigError, match=f"{size}x{size}"):
    iv.inception_v4(input_shape=(size, size, 3), aux_logits=aux)


def test_smallest_inputs_build():
  base = iv.inception_v4(input_shape=(75, 75, 3), include_top=False)
  assert tuple(base.output.shape) == (None, 1, 1, 1536)
  assert not any(iv.slim_name(v).startswith(iv.HEAD_SCOPES) for v in base.weights)
  with_aux = iv.inception_v4(num_classes=7, input_shape=(107, 107, 3))
  assert tuple(iv.end_point(with_aux, "Mixed_6h").shape[1:]) == (5, 5, 1024)
  aux_kernel = with_aux.get_layer("AuxLogits.Conv2d_2a").kernel
  assert tuple(aux_kernel.shape) == (1, 1, 128, 768)  # as large as its 1x1 input


def test_fine_tuning_head_under_mixed_precision():
  keras.mixed_precision.set_global_policy("mixed_float16")
  try:
    model = iv.inception_v4(num_classes=120, input_shape=(75, 75, 3), aux_logits=False,
                            hidden_units=512, hidden_l2=1e-4, hidden_dropout_rate=0.5,
                            logits_stddev=0.01)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  shapes = {iv.slim_name(v): tuple(v.shape) for v in model.weights}
  assert shapes["InceptionV4/Logits/Hidden/weights"] == (1536, 512)
  assert shapes["InceptionV4/Logits/Logits/weights"] == (512, 120)
  assert model.get_layer("Mixed_7d").output.dtype == "float16"
  assert model.output.dtype == "float32"
  assert all(v.dtype == "float32" for v in model.weights)
  logits_kernel = model.get_layer("Logits.Logits").kernel.numpy()
  assert np.abs(logits_kernel).max() <= 0.02 + 1e-6  # truncated at two stddevs of 0.01
  assert 0.008 < logits_kernel.std() < 0.01
  logits = model(np.zeros((2, 75, 75, 3), np.float32), training=False)
  assert logits.shape == (2, 120) and logits.dtype == "float32"
  # One loss per convolution (slim's weight decay), one per logits kernel, one for the hidden layer.
  num_convs = sum(isinstance(layer, keras.layers.Conv2D) for layer in model.layers)
  assert len(model.losses) == num_convs + 2
