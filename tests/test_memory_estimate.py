"""Tests for scripts/benchmarking/memory_estimate.py on models small enough to count by hand."""
import keras
import pytest

from scripts.benchmarking import memory_estimate

# Input(4, 4, 1) -> Conv2D(2, 3, same) -> Flatten -> Dense(3):
# parameters: conv 3*3*1*2 + 2 = 20, dense 32*3 + 3 = 99, total 119;
# outputs per example: conv 4*4*2 = 32, flatten 32, dense 3, total 67;
# input per example: 16 floats.
PARAMS = 119
OUTPUTS_PER_EXAMPLE = 67
INPUTS_PER_EXAMPLE = 16


def build_tiny_model():
  inputs = keras.Input((4, 4, 1))
  x = keras.layers.Conv2D(2, 3, padding="same")(inputs)
  x = keras.layers.Flatten()(x)
  return keras.Model(inputs, keras.layers.Dense(3)(x))


def test_float32_counts_by_hand():
  est = memory_estimate.estimate(build_tiny_model(), batch_size=5, mixed_precision=False)
  assert est.num_parameters == est.num_trainable == PARAMS
  assert est.activation_elements == 5 * OUTPUTS_PER_EXAMPLE
  assert est.parameters == 4 * PARAMS
  assert est.float16_weights == 0
  assert est.gradients == 4 * PARAMS
  assert est.optimizer_slots == 2 * 4 * PARAMS
  assert est.inputs == 4 * 5 * INPUTS_PER_EXAMPLE
  assert est.activations == 4 * 5 * OUTPUTS_PER_EXAMPLE
  rest = 4 * PARAMS * 4 + 4 * 5 * (INPUTS_PER_EXAMPLE + OUTPUTS_PER_EXAMPLE)
  assert est.workspace == int(0.25 * rest)
  assert est.total == rest + est.workspace


def test_mixed_precision_counts_by_hand():
  est = memory_estimate.estimate(
      build_tiny_model(), batch_size=5, mixed_precision=True, optimizer_slots=1, overhead=0.0)
  assert est.parameters == 4 * PARAMS  # float32 master weights
  assert est.float16_weights == 2 * PARAMS
  assert est.gradients == 4 * PARAMS
  assert est.optimizer_slots == 4 * PARAMS
  assert est.inputs == 4 * 5 * INPUTS_PER_EXAMPLE  # the batch arrives in float32
  assert est.activations == 2 * 5 * OUTPUTS_PER_EXAMPLE
  assert est.workspace == 0
  assert est.total == 14 * PARAMS + 4 * 5 * INPUTS_PER_EXAMPLE + 2 * 5 * OUTPUTS_PER_EXAMPLE


def test_nested_shared_and_frozen_layers():
  block = keras.Sequential([keras.layers.Conv2D(4, 3, padding="same"),
                            keras.layers.BatchNormalization()])
  inputs = keras.Input((None, None, 3), dtype="uint8")
  x = block(keras.layers.Rescaling(1 / 255)(inputs))
  shared = keras.layers.Conv2D(4, 1)
  model = keras.Model(inputs, keras.layers.Add()([shared(x), shared(x)]))
  est = memory_estimate.estimate(model, batch_size=2, mixed_precision=False,
                                 input_shapes=[(8, 8, 3)])
  # conv 3*3*3*4 + 4 = 112, BN 4 * 4 = 16 (8 not trainable), shared conv 4*4 + 4 = 20.
  assert est.num_parameters == 148
  assert est.num_trainable == 140
  # Rescaling 8*8*3, then conv, BN, shared conv twice and add, 8*8*4 each.
  assert est.activation_elements == 2 * (192 + 5 * 256)
  assert est.inputs == 2 * 192  # uint8


def test_a_forward_pass_holds_only_the_outputs_still_to_be_read():
  est = memory_estimate.estimate(build_tiny_model(), batch_size=5, mixed_precision=False, overhead=0.0,
                                 training=False)
  assert est.gradients == est.optimizer_slots == 0
  # The conv's output is freed once Flatten has read it: at most those two outputs at once.
  assert est.activations == 4 * 5 * (32 + 32)
  assert est.total == 4 * PARAMS + 4 * 5 * INPUTS_PER_EXAMPLE + 4 * 5 * 64


def test_evaluation_in_windows_is_the_windows_forward_pass_and_bytes_per_image_pixel():
  inputs = keras.Input((None, None, 3))
  x = keras.layers.Conv2D(2, 1)(inputs)  # 3 * 2 + 2 = 8 parameters
  model = keras.Model(inputs, keras.layers.Conv2D(3, 1)(x))  # 2 * 3 + 3 = 9
  tiled = memory_estimate.tiled_estimate(model, window=8, windows_per_call=2, num_classes=3,
                                         mixed_precision=False, overhead=0.0)
  # Two 8x8 windows in float32; the outputs 2x8x8x2 and 2x8x8x3 alive together.
  assert tiled.windows.total == 4 * 17 + 4 * 2 * 64 * 3 + 4 * 2 * 64 * (2 + 3)
  # Per pixel: the uint8 image three times, three float32 logits of 3 classes.
  assert tiled.bytes_per_pixel == 3 * 3 + 3 * 4 * 3
  assert tiled.largest_image(tiled.windows.total + 45 * 100) == 100
  assert "largest image within budget" in tiled.format_table(tiled.windows.total + 45 * 100)
  scaled = memory_estimate.tiled_estimate(model, 8, 2, 3, False, max_scale=1.25, augmented=True, overhead=0.0)
  assert scaled.bytes_per_pixel == 1.25 ** 2 * (45 + 12) + 2 * 4 * 3


def test_unknown_dimension_needs_input_shapes():
  inputs = keras.Input((None, None, 3))
  model = keras.Model(inputs, keras.layers.Conv2D(2, 3)(inputs))
  with pytest.raises(ValueError, match="input_shapes"):
    memory_estimate.estimate(model, batch_size=1, mixed_precision=False)


def test_format_table_against_budget():
  est = memory_estimate.estimate(build_tiny_model(), batch_size=1, mixed_precision=True)
  table = est.format_table(budget_bytes=4096 * memory_estimate.MIB)
  assert "119 parameters" in table
  assert "mixed_float16" in table
  assert "fits" in table
  small = est.format_table(budget_bytes=100)
  assert "DOES NOT FIT" in small
