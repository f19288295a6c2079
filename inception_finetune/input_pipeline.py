"""The two pipelines every classification source becomes (sources.py makes the sources).

  train: endless, shuffled with the seed, optionally oversampling rare classes, Inception training
    distortions seeded per element (preprocessing.py), then RandAugment, mixup and CutMix
    (augment.py) seeded per batch.
  eval: one pass in order, slim's evaluation preprocessing; or, with uint8_images, the images as
    decoded, one a batch (what a SavedModel that preprocesses inside takes).
"""
import tensorflow as tf

from common.data import image_checks
from common.data import pipeline
from common.data.normalization import unit_to_symmetric
from inception_finetune import augment
from inception_finetune import preprocessing


def make_train(source, settings, batch_size, seed, num_classes):
  """The endless training pipeline of a Source, as the DataSettings' train group says."""
  size, train, central_fraction = settings.image_size, settings.train, settings.eval.central_fraction
  records = source.read(seed).enumerate()
  if train.oversample_to:
    records = pipeline.oversample(records, source.counts, train.oversample_to, seed)
  mixing = augment.Mixing(train.mixup_alpha, train.cutmix_alpha, train.mix_prob, train.mix_switch_prob)
  augments_batches = mixing.on or train.randaugment_ops > 0

  def preprocess(index, example):
    contents, label = example
    image = image_checks.decode_image(contents)
    element_seed = tf.stack([tf.cast(seed, tf.int64), index])
    if train.augment:
      image = preprocessing.preprocess_for_train(image, size, size, element_seed,
                                                 fast_mode=train.fast_mode)
    else:
      image = preprocessing.preprocess_for_eval(image, size, size, central_fraction)
    # A batch's draws are seeded by its first image's place in the stream.
    return (image, label, index) if augments_batches else (image, label)

  def augment_batch(images, labels, indices):
    batch_seed = tf.stack([tf.cast(seed, tf.int64), indices[0]])
    if train.randaugment_ops:  # after the crop, as timm; its operations work in [0, 1]
      images = unit_to_symmetric(augment.rand_augment(
          (images + 1.0) / 2.0, train.randaugment_ops, train.randaugment_magnitude, batch_seed))
    if mixing.on:
      return augment.mix_batch(images, labels, num_classes, mixing, batch_seed)
    return images, labels

  batches = records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  batches = batches.batch(batch_size, drop_remainder=True)
  if augments_batches:
    batches = batches.map(augment_batch, num_parallel_calls=tf.data.AUTOTUNE)
  return batches.prefetch(tf.data.AUTOTUNE)


def make_eval(source, settings, uint8_images):
  """One pass of a Source in order: slim's evaluation preprocessing, or uint8_images as decoded."""
  size = settings.image_size

  def preprocess(contents, label):
    image = image_checks.decode_image(contents)
    if uint8_images:
      return image, label
    return preprocessing.preprocess_for_eval(image, size, size, settings.eval.central_fraction), label

  images = source.read(None).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  batch_size = 1 if uint8_images else settings.eval.eval_batch_size  # uint8 images differ in size
  return images.batch(batch_size).prefetch(tf.data.AUTOTUNE)
