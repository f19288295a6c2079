"""Training memory of a Keras model, estimated without a GPU.

What one training step keeps on the device:
- parameters in float32 (under mixed precision too: they are the master weights),
- under mixed precision, the float16 copy of each trainable weight used by the layers,
- a float32 gradient per trainable parameter,
- optimizer slots per trainable parameter (Adam: 2, SGD with momentum: 1),
- the input batch, and every layer's output for the batch (kept for the backward
  pass), 2 bytes per float under mixed precision, 4 otherwise,
- workspace (cuDNN scratch, activation gradients during the backward pass,
  allocator fragmentation) as a stated fraction of the rest.

Reshapes and identities are counted though they share their input's buffer,
which errs on the safe side. The CUDA context (a few hundred MB on the card)
is outside TensorFlow's allocator and outside this estimate.
"""
import dataclasses

import keras
import numpy as np
import tensorflow as tf

MIB = 1024 * 1024

DEFAULT_OVERHEAD = 0.25  # a guess; compare with a measured GPU peak to calibrate


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
  """Parts of one training step's device memory, in bytes."""
  batch_size: int
  mixed_precision: bool
  num_parameters: int
  num_trainable: int
  activation_elements: int  # layer outputs for the whole batch (all, also for a forward pass alone)
  parameters: int
  float16_weights: int
  gradients: int
  optimizer_slots: int
  inputs: int
  activations: int
  workspace: int
  overhead: float
  optimizer_slots_per_parameter: int

  @property
  def total(self):
    return (self.parameters + self.float16_weights + self.gradients + self.optimizer_slots
            + self.inputs + self.activations + self.workspace)

  def format_table(self, budget_bytes=None):
    """Rows of part and MiB; with budget_bytes, a last row says whether it fits."""
    precision = "mixed_float16" if self.mixed_precision else "float32"
    float_type = "float16" if self.mixed_precision else "float32"
    rows = [
        ("parameters (float32)", self.parameters),
        ("float16 weight copies", self.float16_weights),
        ("gradients (float32)", self.gradients),
        (f"optimizer slots ({self.optimizer_slots_per_parameter}/parameter)",
         self.optimizer_slots),
        (f"input batch ({self.batch_size})", self.inputs),
        (f"activations ({float_type})", self.activations),
        (f"workspace (+{self.overhead:.0%})", self.workspace),
        ("total", self.total),
    ]
    lines = [f"memory estimate: {self.num_parameters:,} parameters "
             f"({self.num_trainable:,} trainable), batch {self.batch_size}, {precision}"]
    lines += [f"  {name:<34}{size / MIB:>10.1f} MiB" for name, size in rows]
    if budget_bytes:
      verdict = "fits" if self.total <= budget_bytes else "DOES NOT FIT"
      lines.append(f"  {'budget':<34}{budget_bytes / MIB:>10.1f} MiB  "
                   f"{verdict} ({self.total / budget_bytes:.0%})")
    return "\n".join(lines)


def estimate(model, batch_size, mixed_precision, optimizer_slots=2,
             input_shapes=None, overhead=DEFAULT_OVERHEAD, training=True):
  """Estimates one training step's memory for a functional or Sequential model.

  Args:
    model: a built keras functional or Sequential model.
    batch_size: examples per step on one device.
    mixed_precision: True for the mixed_float16 policy.
    optimizer_slots: slot variables per trainable parameter (Adam: 2).
    input_shapes: per-example shape of each model input; needed when the
      model's inputs have unknown (None) dimensions besides the batch.
    overhead: workspace as a fraction of everything else.
    training: False for a forward pass alone (evaluation): no gradients or
      optimizer slots, and of the layers' outputs only the most alive at once.

  Returns:
    A MemoryEstimate.
  """
  input_specs = make_input_specs(model, batch_size, input_shapes)
  steps = []  # (the ids of the tensors a layer reads, its outputs), in the order they run
  trace_layers(model, input_specs, lambda layer, args, outputs: steps.append(
      ({id(x) for x in tf.nest.flatten(args) if isinstance(x, keras.KerasTensor)}, outputs)))
  output_specs = [spec for _, outputs in steps for spec in outputs]
  float_bytes = 2 if mixed_precision else 4
  activation_elements = sum(_num_elements(s) for s in output_specs)
  activations = (sum(_num_elements(s) * _element_bytes(s.dtype, float_bytes) for s in output_specs)
                 if training else _peak_alive(steps, float_bytes))
  inputs = sum(_num_elements(s) * tf.as_dtype(s.dtype).size for s in input_specs)
  num_parameters = _count(model.weights)
  num_trainable = _count(model.trainable_weights)
  parts = dict(
      parameters=4 * num_parameters,
      float16_weights=2 * num_trainable if mixed_precision else 0,
      gradients=4 * num_trainable if training else 0,
      optimizer_slots=4 * optimizer_slots * num_trainable if training else 0,
      inputs=inputs,
      activations=activations,
  )
  return MemoryEstimate(
      batch_size=batch_size, mixed_precision=mixed_precision,
      num_parameters=num_parameters, num_trainable=num_trainable,
      activation_elements=activation_elements,
      workspace=int(overhead * sum(parts.values())), overhead=overhead,
      optimizer_slots_per_parameter=optimizer_slots, **parts)


@dataclasses.dataclass(frozen=True)
class TiledEstimate:
  """Evaluation of an image in windows (segmentation's eval.window): a forward pass over one call's
  windows, whatever the image's size, and the buffers as large as the image, bytes_per_pixel each."""
  windows: MemoryEstimate
  window: int
  windows_per_call: int
  bytes_per_pixel: float

  def largest_image(self, budget_bytes):
    """The pixels of the largest image whose evaluation fits budget_bytes (0 if none)."""
    return max(int((budget_bytes - self.windows.total) // self.bytes_per_pixel), 0)

  def format_table(self, budget_bytes):
    largest = self.largest_image(budget_bytes)
    side = int(largest ** 0.5)
    return "\n".join([
        f"evaluation in windows of {self.window}x{self.window}, {self.windows_per_call} per call "
        f"(forward pass only):",
        *[line for line in self.windows.format_table(budget_bytes).splitlines()[1:] if " 0.0 MiB" not in line],
        f"  {'+ per image pixel':<34}{self.bytes_per_pixel:>10.1f} B",
        f"  {'largest image within budget':<34}{largest / 1e6:>10.1f} Mpixels (about {side}x{side})"])


def tiled_estimate(model, window, windows_per_call, num_classes, mixed_precision, max_scale=1.0,
                   augmented=False, overhead=DEFAULT_OVERHEAD):
  """The memory of evaluating an image in windows (segmentation/inference.py): the network's forward
  pass over windows_per_call windows, and per image pixel at the largest scale: the uint8 image three
  times (the image, padded, transposed), three float32 logits (the windows' sum, the sum updated, each
  pixel's average); resized, its float32 copy; with test-time augmentation, each variant's logits at the
  image's size and their running sum."""
  windows = estimate(model, windows_per_call, mixed_precision, input_shapes=[(window, window, 3)],
                     overhead=overhead, training=False)
  per_pixel = max_scale ** 2 * (3 * 3 + 3 * 4 * num_classes + (12 if max_scale != 1.0 else 0))
  per_pixel += 2 * 4 * num_classes if augmented else 0
  return TiledEstimate(windows, window, windows_per_call, (1 + overhead) * per_pixel)


def _peak_alive(steps, float_bytes):
  """The most bytes of layer outputs alive at once in a forward pass that frees each output after the
  last layer that reads it (a layer's inputs and outputs both alive while it runs)."""
  last_read = {key: i for i, (reads, _) in enumerate(steps) for key in reads}
  alive, peak = {}, 0
  for i, (_, outputs) in enumerate(steps):
    alive.update({id(s): _num_elements(s) * _element_bytes(s.dtype, float_bytes) for s in outputs})
    peak = max(peak, sum(alive.values()))
    alive = {key: size for key, size in alive.items() if last_read.get(key, len(steps)) > i}
  return peak


def make_input_specs(model, batch_size, input_shapes=None):
  """Symbolic inputs of the model with the batch and every dimension known."""
  inputs = model.inputs
  if input_shapes is None:
    input_shapes = [tuple(x.shape[1:]) for x in inputs]
  if len(input_shapes) != len(inputs):
    raise ValueError(f"model {model.name} has {len(inputs)} inputs, "
                     f"input_shapes gives {len(input_shapes)}")
  specs = []
  for index, (x, shape) in enumerate(zip(inputs, input_shapes)):
    if any(d is None for d in shape):
      raise ValueError(f"input {index} of model {model.name} has shape {tuple(x.shape)}; "
                       "pass input_shapes with every dimension but the batch")
    specs.append(keras.KerasTensor((batch_size, *shape), dtype=x.dtype))
  return specs


def _graph_model(model):
  """The functional graph inside a functional or built Sequential model, else None."""
  if isinstance(model, keras.Sequential):
    return getattr(model, "_functional", None)
  return model if hasattr(model, "_run_through_graph") else None


def trace_layers(model, input_specs, record):
  """Runs the model's graph on symbolic inputs, calling record(layer, args, outputs).

  args are the layer's positional arguments and outputs the flat list of its
  output specs. Nested models are traced layer by layer; their own outputs are
  not recorded again.
  """
  graph = _graph_model(model)
  if graph is None:
    raise ValueError(f"model {model.name} ({type(model).__name__}) is not functional or "
                     "Sequential; its layers cannot be traced")

  def traced(op):
    def run(*args, **kwargs):
      if isinstance(op, keras.Model):
        return trace_layers(op, args[0], record)
      outputs = op.compute_output_spec(*args, **kwargs)
      record(op, args, tf.nest.flatten(outputs))
      return outputs
    return run

  return graph._run_through_graph(input_specs, operation_fn=traced)  # pylint: disable=protected-access


def _num_elements(spec):
  return int(np.prod(spec.shape, dtype=np.int64))


def _element_bytes(dtype, float_bytes):
  dtype = tf.as_dtype(dtype)
  return float_bytes if dtype.is_floating else dtype.size


def _count(variables):
  unique = {id(v): v for v in variables}
  return sum(int(np.prod(v.shape, dtype=np.int64)) for v in unique.values())
