"""Training augmentation of the classifier beside TF-Slim's distortions: RandAugment per image,
mixup and CutMix per batch, as timm has them; stateless and seeded, so that a resumed run draws
what the uninterrupted one drew.

RandAugment (data.randaugment_ops N, data.randaugment_magnitude M): N operations drawn at random
(with replacement) from OPERATIONS, each applied with probability OP_PROBABILITY at the strength
M / MAX_MAGNITUDE, with a random sign where it has one (timm's "increasing" variants: a larger M
is always stronger). Seeded by the element's seed (data._make_train: the run's seed and the image's
place in the stream).

Mixup and CutMix (data.mixup_alpha, data.cutmix_alpha, data.mix_prob, data.mix_switch_prob): a
batch is mixed with itself reversed, with probability mix_prob; with both on, CutMix is picked
with probability mix_switch_prob, else mixup. Mixup blends whole images by lambda ~ Beta(alpha,
alpha); CutMix pastes a box of the partner whose area is about 1 - lambda, clipped at the border,
and the labels' weight is the share of pixels each image keeps. Labels become one-hot vectors mixed
by that weight (label smoothing is applied on top by the loss, as timm's mixup_target). Seeded by
the batch's place in the stream (the place of its first image).
"""
import dataclasses
import functools
import math

import tensorflow as tf

# Each draw's seed is the element's (or batch's) seed folded with its own number, so that none shares
# the seed TF-Slim's distortions split.
RANDAUGMENT, MIXING = 1, 2
MAX_MAGNITUDE = 10  # RandAugment's scale of strengths (the paper's and timm's)
OP_PROBABILITY = 0.5  # timm's RandAugment applies each drawn operation half the time
FILL = 0.5  # what a geometric operation brings in from outside the image: timm's grey 128


@dataclasses.dataclass(frozen=True)
class Mixing:
  """The batch mixing the data section asks for (data.read_settings checks it); off by default."""
  mixup_alpha: float = 0.0
  cutmix_alpha: float = 0.0
  prob: float = 1.0  # of mixing a batch at all
  switch_prob: float = 0.5  # of CutMix rather than mixup, with both on

  @property
  def on(self):
    return self.mixup_alpha > 0 or self.cutmix_alpha > 0


# RandAugment: images are float32 [H, W, 3] in [0, 1]; each operation takes (image, level in
# [0, 1], sign +-1.0) and leaves [0, 1].


def _blend(image, degenerate, factor):
  """PIL's ImageEnhance: factor 0 gives `degenerate`, 1 the image, beyond 1 moves away from it."""
  return degenerate + factor * (image - degenerate)


def _enhance(degenerate_fn, image, level, sign):
  return _blend(image, degenerate_fn(image), 1.0 + sign * 0.9 * level)


def _smoothed(image):
  """PIL's SMOOTH filter (the degenerate image of Sharpness), edges mirrored."""
  kernel = tf.constant([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
  padded = tf.pad(image, [[1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
  return tf.nn.depthwise_conv2d(padded[None], kernel, [1, 1, 1, 1], "VALID")[0]


def _warp(image, transform):
  """The image resampled bilinearly: output pixel (x, y) reads the input at (a0 x + a1 y + a2,
  b0 x + b1 y + b2), transform = (a0, a1, a2, b0, b1, b2)."""
  transform = tf.concat([tf.cast(tf.stack(transform), tf.float32), tf.zeros([2])], 0)
  return tf.raw_ops.ImageProjectiveTransformV3(
      images=image[None], transforms=transform[None], output_shape=tf.shape(image)[:2],
      interpolation="BILINEAR", fill_mode="CONSTANT", fill_value=FILL)[0]


def _rotate(image, level, sign):
  angle = sign * level * math.radians(30.0)
  cy, cx = ((tf.cast(n, tf.float32) - 1) / 2 for n in tf.unstack(tf.shape(image)[:2]))
  cos, sin = tf.cos(angle), tf.sin(angle)
  return _warp(image, [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy])


def _shift(image, level, sign, axis):
  offset = sign * level * 0.45 * tf.cast(tf.shape(image)[1 - axis], tf.float32)  # timm's TranslateRel
  return _warp(image, [1.0, 0.0, offset, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, 0.0, 1.0, offset])


def _shear(image, level, sign, axis):
  shear = sign * level * 0.3
  return _warp(image, [1.0, shear, 0.0, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, shear, 1.0, 0.0])


def _auto_contrast(image, level, sign):
  del level, sign
  low = tf.reduce_min(image, axis=[0, 1])
  high = tf.reduce_max(image, axis=[0, 1])
  return tf.where(high > low, (image - low) / tf.maximum(high - low, 1e-6), image)


def _posterize(image, level, sign):
  del sign
  step = 2.0 ** round(4 * level)  # 8 bits kept at level 0, 4 at the top
  return tf.floor(tf.round(image * 255.0) / step) * step / 255.0


def _solarize(image, level, sign):
  del sign
  return tf.where(image >= (256.0 - 256.0 * level) / 255.0, 1.0 - image, image)


def _solarize_add(image, level, sign):
  del sign
  return tf.where(image < 128.0 / 255.0, image + 110.0 / 255.0 * level, image)


def _grey(image):
  return tf.image.rgb_to_grayscale(image)


# (name, operation); Equalize, in timm's list, is left out: its histogram does not map onto tf ops
# as simply.
OPERATIONS = (
    ("auto_contrast", _auto_contrast),
    ("invert", lambda image, level, sign: 1.0 - image),
    ("rotate", _rotate),
    ("posterize", _posterize),
    ("solarize", _solarize),
    ("solarize_add", _solarize_add),
    ("color", functools.partial(_enhance, _grey)),
    ("contrast", functools.partial(_enhance, lambda image: tf.reduce_mean(_grey(image)))),
    ("brightness", functools.partial(_enhance, tf.zeros_like)),
    ("sharpness", functools.partial(_enhance, _smoothed)),
    ("shear_x", functools.partial(_shear, axis=0)),
    ("shear_y", functools.partial(_shear, axis=1)),
    ("translate_x", functools.partial(_shift, axis=0)),
    ("translate_y", functools.partial(_shift, axis=1)),
)


def rand_augment(image, num_ops, magnitude, seed):
  """float32 [H, W, 3] in [0, 1] -> the same after num_ops operations of RandAugment at
  `magnitude` (0 to MAX_MAGNITUDE); seed: int64 [2], the element's."""
  level = magnitude / MAX_MAGNITUDE
  seed = _fold(seed, RANDAUGMENT)
  for layer in range(num_ops):
    layer_seed = _fold(seed, layer)
    applies, positive = tf.unstack(tf.random.stateless_uniform([2], layer_seed) < [OP_PROBABILITY, 0.5])
    sign = tf.where(positive, 1.0, -1.0)
    choice = tf.random.stateless_uniform([], _fold(layer_seed, 1), maxval=len(OPERATIONS), dtype=tf.int32)
    # Branch len(OPERATIONS), the last, leaves the image as it is.
    branches = [functools.partial(op, image, level, sign) for _, op in OPERATIONS]
    branches.append(lambda unchanged=image: unchanged)
    shape = image.shape
    image = tf.clip_by_value(tf.switch_case(tf.where(applies, choice, len(OPERATIONS)), branches), 0.0, 1.0)
    image.set_shape(shape)
  return image


# Mixup and CutMix.


def draw_mix(mixing, height, width, seed):
  """(weight, share): each image's weight in the mixed batch, float32 [height, width, 1] (lambda
  everywhere for mixup, 0 in CutMix's box and 1 outside it, 1 for an unmixed batch), and its share
  of the label, a scalar (lambda; the share of pixels outside the box). seed: int64 [2]."""
  mix_seed, kind_seed, lambda_seed, box_seed = tf.unstack(
      tf.random.experimental.stateless_split(_fold(seed, MIXING), num=4))
  both = mixing.mixup_alpha > 0 and mixing.cutmix_alpha > 0
  cutmix = tf.random.stateless_uniform([], kind_seed) < (
      mixing.switch_prob if both else float(mixing.cutmix_alpha > 0))
  alpha = tf.where(cutmix, float(mixing.cutmix_alpha), float(mixing.mixup_alpha))
  gammas = tf.random.stateless_gamma([2], lambda_seed, alpha=alpha)
  lam = tf.math.divide_no_nan(gammas[0], gammas[0] + gammas[1])  # ~ Beta(alpha, alpha)
  box, kept = _cutmix_box(height, width, lam, box_seed)
  mixes = tf.random.stateless_uniform([], mix_seed) < mixing.prob
  weight = tf.where(mixes, tf.where(cutmix, box, tf.fill([height, width, 1], lam)), 1.0)
  share = tf.where(mixes, tf.where(cutmix, kept, lam), 1.0)
  return weight, share


def _cutmix_box(height, width, lam, seed):
  """timm's rand_bbox: a box of sides sqrt(1 - lam) times the image's, centred anywhere, clipped at
  the border. Returns (0 in the box and 1 outside, float32 [height, width, 1]; the share outside)."""
  sides = tf.cast(tf.cast([height, width], tf.float32) * tf.sqrt(1.0 - lam), tf.int32)
  centre = tf.random.stateless_uniform([2], seed, minval=0, maxval=tf.int32.max, dtype=tf.int32) % [height, width]
  low = tf.clip_by_value(centre - sides // 2, 0, [height, width])
  high = tf.clip_by_value(centre + sides // 2, 0, [height, width])
  rows, cols = (tf.logical_and(tf.range(n) >= low[i], tf.range(n) < high[i])
                for i, n in enumerate((height, width)))
  inside = tf.logical_and(rows[:, None], cols[None, :])[..., None]
  area = tf.cast(tf.reduce_prod(high - low), tf.float32) / float(height * width)
  return tf.cast(tf.logical_not(inside), tf.float32), 1.0 - area


def mix_batch(images, labels, num_classes, mixing, seed):
  """A batch (float32 images [B, H, W, C], int class ids [B]) mixed with itself reversed ->
  (images, float32 soft labels [B, num_classes]); seed: int64 [2], the batch's."""
  height, width = images.shape[1], images.shape[2]
  weight, share = draw_mix(mixing, height, width, seed)
  targets = tf.one_hot(labels, num_classes)
  mixed = images * weight + tf.reverse(images, [0]) * (1.0 - weight)
  return mixed, targets * share + tf.reverse(targets, [0]) * (1.0 - share)


def _fold(seed, draw):
  return tf.random.experimental.stateless_fold_in(seed, draw)
