"""Triplet's two pipelines: P x K training batches and evaluation images in order.

Training batches hold P identities with K images each, sampled entirely inside tf.data with
stateless seeds, so the iterator can be checkpointed and a run replays the same batches; each batch
is identity-major (K consecutive images per identity), so splitting it across replicas keeps whole
identities together when P is a multiple of the replica count.
"""
import os

import numpy as np
import tensorflow as tf

from common.contract.errors import DataError
from common.data import image_checks
from common.data import normalization

# Independent random streams derived from the one seed.
_IDENTITY_ORDER_STREAM, _IMAGE_PICK_STREAM, _AUGMENT_STREAM = 1, 2, 3


def load_image(path, load_size):
  """File -> uint8-valued float32 [load_size, load_size, 3] (resized when it is another size)."""
  image = image_checks.decode_image(tf.io.read_file(path))
  return tf.image.resize(image, [load_size, load_size])


def preprocess_for_train(image, crop_size, seed, normalizer, flip=True):
  """Random crop_size crop and, with flip, horizontal flip (stateless, from a [2] seed), then
  normalization."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  image = tf.image.stateless_random_crop(image, [crop_size, crop_size, 3], crop_seed)
  if flip:
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
  return normalizer(image)


def preprocess_for_eval(image, crop_size, normalizer):
  """Central crop_size crop of an image or a batch, then normalization."""
  offset_h = (tf.shape(image)[-3] - crop_size) // 2
  offset_w = (tf.shape(image)[-2] - crop_size) // 2
  image = tf.image.crop_to_bounding_box(image, offset_h, offset_w, crop_size, crop_size)
  return normalizer(image)


def _stream_seed(seed, stream, index):
  """A [2] stateless seed for element `index` of an independent stream."""
  base = tf.constant([seed, stream], tf.int64)
  return tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))


def _identity_batches(num_identities, p, seed):
  """Endless [P] identity indices: each epoch a fresh permutation, every identity once per epoch.

  An epoch is ceil(N / P) batches; its last batch is topped up with identities
  from the start of the permutation, which are distinct from the ones it holds.
  """
  batches_per_epoch = -(-num_identities // p)

  def epoch_batches(epoch):
    scores = tf.random.stateless_uniform([num_identities], _stream_seed(seed, _IDENTITY_ORDER_STREAM, epoch))
    order = tf.argsort(scores)
    order = tf.concat([order, order[:batches_per_epoch * p - num_identities]], axis=0)
    return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [batches_per_epoch, p]))

  return tf.data.Dataset.counter().flat_map(epoch_batches)


def _pick_images(starts, counts, k, seed):
  """(batch index, [P] identities) -> [P * K] file indices and labels, K per identity.

  Each identity's images come in a random order; identities with fewer than K
  images cycle through theirs (the "repeat" policy).
  """

  def pick(batch_index, identities):
    identity_counts = tf.gather(counts, identities)
    longest = tf.reduce_max(identity_counts)
    scores = tf.random.stateless_uniform(
        tf.stack([tf.size(identities), longest]), _stream_seed(seed, _IMAGE_PICK_STREAM, batch_index))
    # Positions past an identity's image count sort last.
    scores = tf.where(tf.range(longest)[None, :] < identity_counts[:, None], scores, 2.0)
    order = tf.argsort(scores, axis=1)
    columns = tf.range(k)[None, :] % identity_counts[:, None]
    files = tf.gather(order, columns, batch_dims=1) + tf.gather(starts, identities)[:, None]
    labels = tf.repeat(identities, k)
    return tf.reshape(files, [-1]), labels

  return pick


def make_train_dataset(identities, identities_per_batch, images_per_identity, load_size, crop_size,
                       normalization_name, seed, flip=True):
  """Endless batches (images [P*K, crop, crop, 3] float32, labels [P*K] int32).

  Labels index `identities`. Every batch holds P distinct identities, K images
  each, identity-major; over ceil(N / P) batches every identity appears.
  """
  normalizer = normalization.get_normalizer(normalization_name)
  p, k = identities_per_batch, images_per_identity
  if len(identities) < p:
    where = os.path.dirname(identities[0].directory) if identities else "the data"
    raise DataError(f"{where}: {len(identities)} usable identities, but a batch takes "
                    f"data.identities_per_batch={p} distinct ones; lower it or add identities")
  paths = tf.constant([path for identity in identities for path in identity.paths])
  counts = np.array([len(identity.paths) for identity in identities], np.int32)
  starts = tf.constant(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32))
  counts = tf.constant(counts)

  def load(index, file_and_label):
    file_index, label = file_and_label
    image = load_image(tf.gather(paths, file_index), load_size)
    return preprocess_for_train(image, crop_size, _stream_seed(seed, _AUGMENT_STREAM, index),
                                normalizer, flip), label

  dataset = _identity_batches(len(identities), p, seed).enumerate()
  dataset = dataset.map(_pick_images(starts, counts, k, seed)).unbatch().enumerate()
  dataset = dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(p * k, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(paths, load_size, crop_size, normalization_name, batch_size):
  """Center-cropped images of `paths`, in order, in batches of batch_size (the last may be smaller)."""
  normalizer = normalization.get_normalizer(normalization_name)
  dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string))
  dataset = dataset.map(lambda path: preprocess_for_eval(load_image(path, load_size), crop_size, normalizer),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def make_uint8_dataset(paths, load_size, batch_size):
  """Images of `paths` resized to load_size, as uint8, in order: what an exported model takes."""
  dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string))
  dataset = dataset.map(lambda path: tf.cast(tf.round(load_image(path, load_size)), tf.uint8),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
