"""SavedModel export with a serving signature, written so that a crash never leaves half a model."""
import os
import shutil

import tensorflow as tf


def pad_to_multiple(images, multiple):
  """Pads [B, H, W, C] at the bottom and right so that H and W are multiples of `multiple`."""
  shape = tf.shape(images)
  pad_h = (-shape[1]) % multiple
  pad_w = (-shape[2]) % multiple
  return tf.pad(images, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]])


def export_saved_model(model, serve, path, input_signature):
  """Saves `serve` (a function of the signature's tensors, closing over `model`) as serving_default."""
  module = tf.Module()
  module.model = model
  module.serve = tf.function(serve, input_signature=input_signature)
  tmp = path + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
  shutil.rmtree(path, ignore_errors=True)
  os.replace(tmp, path)
  return path


UINT8_IMAGES = tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")
