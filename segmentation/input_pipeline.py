"""The two pipelines every segmentation source becomes (segmentation/sources.py makes the sources).

  train: endless, shuffled with the seed; random patch_size x patch_size crops
    of image and mask together, several per image, cut inside tf.data, with the
    augmentation of segmentation/augment.py (none by default);
    yields (uint8 images [B, p, p, 3], int32 labels [B, p, p]).
  eval: whole images in order, as the source gives them (the forward pads to
    the model's stride after any test-time scaling, as predict does); batches
    of eval_batch_size when all images have the same size, else of one image.
"""
import collections

import tensorflow as tf

from segmentation import augment

# A source in a uniform shape: read(seed) gives (uint8 image [h, w, 3], uint8
# mask [h, w]), shuffled and endless with a seed, in order and once with None.
# size is the number of images; image_size is (h, w) when every image has it,
# else None; skipped names what the check skipped; fingerprint, what the examples are where the
# source says it (TFDS; the input fingerprint lists files otherwise).
Source = collections.namedtuple("Source", ["read", "size", "image_size", "skipped", "fingerprint"],
                                defaults=[(), None])


def make_train(source, batch_size, seed, *, patch_size, patches_per_image, shuffle_buffer, ignore_label,
               augmentation=augment.Augmentation()):
  """Batches of patches of the source's images and masks (data.patch_size, data.patches_per_image,
  data.shuffle_buffer; masks padded with ignore_label where an image is smaller than a patch),
  augmented as augmentation (an augment.Augmentation, data.augment) says."""
  # Records that are patches already need no more than one (identity) crop.
  count = 1 if source.image_size == (patch_size, patch_size) else patches_per_image

  def crop(index, example):
    image, mask = example
    element_seed = tf.stack([tf.cast(seed, tf.int64), index])
    return augment.patches(image, mask, augmentation, patch_size, count, element_seed, ignore_label)

  def to_int32(images, masks):
    return images, tf.cast(masks, tf.int32)

  patches = (source.read(seed)
             .enumerate()
             .map(crop, num_parallel_calls=tf.data.AUTOTUNE)
             .unbatch())
  return (patches.shuffle(shuffle_buffer, seed=seed)
          .batch(batch_size, drop_remainder=True)
          .map(to_int32)
          .prefetch(tf.data.AUTOTUNE))


def make_eval(source, batch_size):
  """One pass of the source's whole images, unpadded: padding them here, before eval.scales scales
  them, gave the network other pixels than predict gives it (the `scenes` preset, seed 0: mIoU
  0.865 against 0.879)."""
  def to_int32(image, mask):
    return image, tf.cast(mask, tf.int32)

  return (source.read(None)
          .map(to_int32, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch_size)
          .prefetch(tf.data.AUTOTUNE))
