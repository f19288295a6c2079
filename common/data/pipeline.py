"""Pieces of tf.data pipelines that the trainers share."""
import tensorflow as tf


def pad_to_multiple(tensor, multiple, value=0, axis=0):
  """Pads axes `axis` and `axis + 1` (height, width) at the end to multiples of `multiple`."""
  shape = tf.shape(tensor)
  pad_h, pad_w = (-shape[axis]) % multiple, (-shape[axis + 1]) % multiple
  rank = tf.rank(tensor)
  paddings = tf.concat([tf.zeros([axis, 2], tf.int32), [[0, pad_h], [0, pad_w]],
                        tf.zeros([rank - axis - 2, 2], tf.int32)], axis=0)
  return tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))
