"""Floating-point operations of a Keras model, counted layer by layer.

A multiply-add counts as 2 FLOPs. Only the layers that multiply by weights are
counted (Dense and the convolutions); normalization, activations, pooling and
additions are a few FLOPs per element, small beside them, so the count is a
slight underestimate. A training step costs the forward pass plus, for each
layer with trainable weights, twice its forward cost: the gradient with
respect to its input and the one with respect to its weights (3 forward
passes when everything trains). Frozen layers are taken to need no backward
pass, true when they all come before the trainable ones (fine-tuning a head
or the last blocks).
"""
import keras
import numpy as np

from scripts.benchmarking import memory_estimate

BACKWARD_FACTOR = 2  # gradients with respect to the input and to the weights


def count_flops(model, batch_size, input_shapes=None, trainable_only=False):
  """FLOPs of one forward pass of `batch_size` examples.

  Args:
    model: a built keras functional or Sequential model.
    batch_size: examples in the pass.
    input_shapes: per-example shape of each model input; needed when the
      model's inputs have unknown (None) dimensions besides the batch.
    trainable_only: count only the layers with trainable weights.

  Returns:
    The count, an int.
  """
  total = 0

  def record(layer, args, outputs):
    nonlocal total
    if not trainable_only or layer.trainable_weights:
      total += layer_flops(layer, args[0] if args else None, outputs[0])

  memory_estimate.trace_layers(
      model, memory_estimate.make_input_specs(model, batch_size, input_shapes), record)
  return total


def count_training_flops(model, batch_size, input_shapes=None):
  """FLOPs of one training step (forward and backward) of `batch_size` examples."""
  return (count_flops(model, batch_size, input_shapes)
          + BACKWARD_FACTOR * count_flops(model, batch_size, input_shapes, trainable_only=True))


def layer_flops(layer, inputs, outputs):
  """FLOPs of one call of a layer, from its symbolic input and output; 0 for uncounted layers."""
  if isinstance(layer, keras.layers.SeparableConv2D):
    depthwise = layer.depthwise_kernel.shape  # (kh, kw, in, multiplier)
    pointwise = layer.pointwise_kernel.shape  # (1, 1, in * multiplier, out)
    spatial = _elements(outputs.shape) // outputs.shape[-1]
    return 2 * spatial * (_elements(depthwise) + _elements(pointwise))
  if isinstance(layer, keras.layers.DepthwiseConv2D):
    kernel = layer.kernel.shape  # (kh, kw, in, multiplier)
    return 2 * _elements(outputs.shape) * kernel[0] * kernel[1]
  if isinstance(layer, keras.layers.Conv2DTranspose):
    # Every input element is multiplied by a kh x kw x out slice of the kernel.
    kernel = layer.kernel.shape  # (kh, kw, out, in)
    return 2 * _elements(inputs.shape) * kernel[0] * kernel[1] * kernel[2]
  if isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
    # Each output element is a dot product over the kernel's window (kh x kw x in / groups).
    return 2 * _elements(outputs.shape) * _elements(layer.kernel.shape[:-1])
  if isinstance(layer, keras.layers.Dense):
    return 2 * _elements(outputs.shape) * layer.kernel.shape[0]
  return 0


def _elements(shape):
  return int(np.prod(shape, dtype=np.int64))
