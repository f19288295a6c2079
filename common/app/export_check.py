"""The check of an export: the export, run by its own runtime, and a reference SavedModel score the
evaluation set through the trainer's Task.evaluate, and Comparison records the largest difference of
each output and the share of equal class ids on the same images. A float export that differs by more
than TOLERANCE fails its check."""
import numpy as np
import tensorflow as tf

# A float export may differ from the SavedModel by this much times max(1, largest |output|).
TOLERANCE = 1e-4


class Comparison:
  """A signature that gives the exported model's outputs and records how far they are from the
  reference's on the same images (resized to image_size for a fixed-size model), and the images."""

  def __init__(self, reference, exported, image_size, keep_images=0):
    self.reference, self.exported, self.image_size = reference, exported, image_size
    self.keep_images, self.images = keep_images, []
    self.max_difference, self.scale, self.same, self.compared = {}, {}, 0, 0

  def __call__(self, images):
    size = tf.shape(images)[1:3]
    if self.image_size and tuple(size.numpy()) != tuple(self.image_size):
      images = tf.cast(tf.round(tf.image.resize(images, self.image_size)), tf.uint8)
    self.images += list(images.numpy()[:max(0, self.keep_images - len(self.images))])
    reference = self.reference(images=images)
    outputs = self.exported(images=images) if self.exported else reference
    for name, value in outputs.items():
      expected = reference[name].numpy()
      if name == "class_ids":
        self.same += int(np.sum(expected == value.numpy()))
        self.compared += expected.size
      elif value.dtype.is_floating:
        difference = np.abs(expected - value.numpy())
        # A NaN the export gives where the SavedModel gives a number is an infinite difference
        # (np.max would carry the NaN, and max() with a NaN keeps its first argument).
        difference = np.where(np.isnan(difference), np.inf, difference)
        self.max_difference[name] = max(self.max_difference.get(name, 0.0), float(np.max(difference)))
        self.scale[name] = max(self.scale.get(name, 1.0), float(np.max(np.abs(expected))))
    return {name: _resized(value, size) for name, value in outputs.items()}

  def failures(self):
    return [f"{name} differs by {difference:.3g}" for name, difference in self.max_difference.items()
            if not difference <= TOLERANCE * self.scale[name]]


def _resized(value, size):
  """A per-pixel output back at the image's size (a fixed-size model's input was resized)."""
  if value.shape.rank < 3 or value.shape[1:3] == tuple(size.numpy()) or value.dtype == tf.string:
    return value
  method = "bilinear" if value.dtype.is_floating else "nearest"
  stacked = value if value.shape.rank == 4 else value[..., None]
  back = tf.cast(tf.image.resize(stacked, size, method=method), value.dtype)
  return back if value.shape.rank == 4 else back[..., 0]


def evaluate(task, signature):
  return task.evaluate(task.saved_model_predict_fn(signature), True).metrics
