"""SavedModel export with a serving signature, written so that a crash never leaves half a model."""
import os
import shutil

import tensorflow as tf


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
