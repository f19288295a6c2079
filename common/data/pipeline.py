"""Pieces of tf.data pipelines that the trainers share: reading listed files, oversampling rare
classes, cropping patches, padding to a multiple."""
import numpy as np
import tensorflow as tf


def read_files(columns, load, seed):
  """load(*row) of each row of `columns` (equally long lists: paths, labels...) as a dataset:
  shuffled and endless with a seed, in order and once with None."""
  rows = tf.data.Dataset.from_tensor_slices(columns)
  if seed is not None:
    rows = rows.shuffle(len(columns[0]), seed=seed, reshuffle_each_iteration=True).repeat()
  return rows.map(load, num_parallel_calls=tf.data.AUTOTUNE)


def oversampling_acceptance(counts, oversample_to):
  """Per-class probability of keeping an example so that class c is drawn in proportion
  to max(count_c, oversample_to): rare classes as though they had oversample_to images."""
  counts = np.maximum(np.asarray(counts, np.float64), 1)
  ratio = np.maximum(counts, oversample_to) / counts
  return (ratio / ratio.max()).astype(np.float32)


def oversample(records, counts, oversample_to, seed):
  """The endless (index, (example, class id)) records, thinned so that every class is drawn as
  though it had at least oversample_to examples (counts: examples per class).

  Rejection sampling on the stream: frequent classes are thinned, so rare ones come up
  relatively more often, with no copy of the data.
  """
  acceptance = tf.constant(oversampling_acceptance(counts, oversample_to))

  def keep(index, record):
    draw_seed = tf.stack([tf.cast(seed, tf.int64) + 1, index])
    return tf.random.stateless_uniform([], draw_seed) < tf.gather(acceptance, record[1])

  return records.filter(keep)


def pad_to_multiple(images, multiple):
  """Pads a batch of images [B, H, W, C] with zeros at the bottom and right to sides that are
  multiples of `multiple`."""
  shape = tf.shape(images)
  # Non-negative operands: tf2onnx lowers FloorMod to a remainder with the dividend's sign.
  pad_h, pad_w = [(multiple - shape[i] % multiple) % multiple for i in (1, 2)]
  padded = tf.pad(images, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]])
  # A reshape to its own size, whose other axes are slices of the input's shape: LiteRT's converter
  # reads their static sizes from it (paddings known only at run time leave every axis unknown to it,
  # and its convolutions need the channels) for a model that takes any image size.
  return tf.reshape(padded, tf.stack([shape[0], shape[1] + pad_h, shape[2] + pad_w, shape[3]]))


def sample_patches(image, mask, patch_size, count, seed, ignore_label):
  """`count` random patch_size crops at the same places of an image and its mask.

  Args:
    image: uint8 [h, w, 3]; smaller images are padded with 0.
    mask: uint8 [h, w]; padded with ignore_label.
    patch_size: crop height and width.
    count: crops.
    seed: int64 [2], for tf.random.stateless_uniform.
    ignore_label: mask value of padding.

  Returns:
    (uint8 [count, p, p, 3], uint8 [count, p, p]).
  """
  image, mask = _pad_to_at_least(image, mask, patch_size, ignore_label)
  # The mask travels as a fourth channel, so both are cut by the same gathers.
  stacked = tf.concat([image, mask[..., None]], axis=-1)
  shape = tf.shape(stacked)
  room = tf.cast(shape[:2] - patch_size + 1, tf.float32)
  offsets = tf.cast(tf.random.stateless_uniform([count, 2], seed) * room, tf.int32)
  offsets = tf.minimum(offsets, shape[:2] - patch_size)
  steps = tf.range(patch_size)
  rows = offsets[:, :1] + steps  # [count, p]
  cols = offsets[:, 1:] + steps
  patches = tf.gather(stacked, rows)  # [count, p, w, 4]
  patches = tf.gather(patches, cols, axis=2, batch_dims=1)  # [count, p, p, 4]
  patches = tf.ensure_shape(patches, [count, patch_size, patch_size, 4])
  return patches[..., :3], patches[..., 3]


def _pad_to_at_least(image, mask, size, ignore_label):
  shape = tf.shape(mask)
  pad_h, pad_w = tf.maximum(size - shape[0], 0), tf.maximum(size - shape[1], 0)
  image = tf.pad(image, [[0, pad_h], [0, pad_w], [0, 0]])
  mask = tf.pad(mask, [[0, pad_h], [0, pad_w]], constant_values=ignore_label)
  return image, mask
