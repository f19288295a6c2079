"""Training augmentation of the classifier beside TF-Slim's distortions: RandAugment and mixup and
CutMix, as timm has them, on batches; stateless and seeded, so that a resumed run draws what the
uninterrupted one drew.

RandAugment (data.randaugment_ops N, data.randaugment_magnitude M): N operations drawn at random
(with replacement) from OPERATIONS, each applied with probability OP_PROBABILITY at the strength
M / MAX_MAGNITUDE, with a random sign where it has one (timm's "increasing" variants: a larger M
is always stronger). Each image draws its own operations, as in timm; they run on the batch, each
operation once on the images that drew it. Seeded by the batch's place in the stream (below).

Mixup and CutMix (data.mixup_alpha, data.cutmix_alpha, data.mix_prob, data.mix_switch_prob): a
batch is mixed with itself reversed, with probability mix_prob; with both on, CutMix is picked
with probability mix_switch_prob, else mixup. Mixup blends whole images by lambda ~ Beta(alpha,
alpha); CutMix pastes a box of the partner whose area is about 1 - lambda, clipped at the border,
and the labels' weight is the share of pixels each image keeps. Labels become one-hot vectors mixed
by that weight (label smoothing is applied on top by the loss, as timm's mixup_target).

Both are seeded by the batch's place in the stream (data._make_train: the run's seed and the place
of the batch's first image), which the checkpointed iterator resumes at.
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


# RandAugment: images are a batch, float32 [B, H, W, 3] in [0, 1]; each operation takes (images,
# level in [0, 1], signs +-1.0 float32 [B]) and leaves [0, 1] (bilinear sampling and the grey fill
# of the geometric ones stay inside it). On batches, an operation's overhead is paid once a batch
# (10-20% more images/s than per image at 75x75; the same at 299x299, where pixels cost the most).


def _per_image(values):
  return tf.reshape(values, [-1, 1, 1, 1])


def _blend(images, degenerate, factor):
  """PIL's ImageEnhance: factor 0 gives `degenerate`, 1 the image, beyond 1 moves away from it."""
  return degenerate + factor * (images - degenerate)


def _enhance(degenerate_fn, images, level, signs):
  # A factor above 1 moves pixels past [0, 1]: the one kind of operation (with solarize_add) that
  # needs clipping.
  return tf.clip_by_value(
      _blend(images, degenerate_fn(images), _per_image(1.0 + signs * 0.9 * level)), 0.0, 1.0)


def _smoothed(images):
  """PIL's SMOOTH filter (the degenerate image of Sharpness: 1 around a centre of 5, over 13), edges
  mirrored. Sums of shifted views, not a depthwise convolution, which returns the wrong shape for
  an empty batch (an operation no image drew)."""
  height, width = tf.shape(images)[1], tf.shape(images)[2]
  padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
  total = tf.add_n([padded[:, dy:dy + height, dx:dx + width] for dy in range(3) for dx in range(3)])
  return (total + 4.0 * images) / 13.0


def _warp(images, transforms):
  """Each image resampled bilinearly: output pixel (x, y) reads the input at (a0 x + a1 y + a2,
  b0 x + b1 y + b2), transforms = (a0, a1, a2, b0, b1, b2), each float32 [B] (or a scalar)."""
  count = tf.shape(images)[0]
  rows = [tf.broadcast_to(tf.cast(t, tf.float32), [count]) for t in transforms]
  transforms = tf.stack(rows + [tf.zeros([count]), tf.zeros([count])], axis=1)
  return tf.raw_ops.ImageProjectiveTransformV3(
      images=images, transforms=transforms, output_shape=tf.shape(images)[1:3],
      interpolation="BILINEAR", fill_mode="CONSTANT", fill_value=FILL)


def _rotate(images, level, signs):
  angles = signs * level * math.radians(30.0)
  cy, cx = ((tf.cast(n, tf.float32) - 1) / 2 for n in tf.unstack(tf.shape(images)[1:3]))
  cos, sin = tf.cos(angles), tf.sin(angles)
  return _warp(images, [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy])


def _shift(images, level, signs, axis):
  offsets = signs * level * 0.45 * tf.cast(tf.shape(images)[2 - axis], tf.float32)  # timm's TranslateRel
  return _warp(images, [1.0, 0.0, offsets, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, 0.0, 1.0, offsets])


def _shear(images, level, signs, axis):
  shears = signs * level * 0.3
  return _warp(images, [1.0, shears, 0.0, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, shears, 1.0, 0.0])


def _auto_contrast(images, level, signs):
  del level, signs
  low = tf.reduce_min(images, axis=[1, 2], keepdims=True)
  high = tf.reduce_max(images, axis=[1, 2], keepdims=True)
  # Each channel stretched to [0, 1]; a flat channel kept. Scale and offset per channel, so that the
  # whole images see one multiply and one add.
  scale = tf.where(high > low, 1.0 / tf.maximum(high - low, 1e-6), 1.0)
  return images * scale + tf.where(high > low, -low * scale, 0.0)


def _posterize(images, level, signs):
  del signs
  step = 2.0 ** round(4 * level)  # 8 bits kept at level 0, 4 at the top
  return tf.floor(tf.round(images * 255.0) / step) * step / 255.0


def _solarize(images, level, signs):
  del signs
  return tf.where(images >= (256.0 - 256.0 * level) / 255.0, 1.0 - images, images)


def _solarize_add(images, level, signs):
  del signs
  return tf.minimum(tf.where(images < 128.0 / 255.0, images + 110.0 / 255.0 * level, images), 1.0)


def _grey(images):
  return tf.image.rgb_to_grayscale(images)


# (name, operation); Equalize, in timm's list, is left out: its histogram does not map onto tf ops
# as simply.
OPERATIONS = (
    ("auto_contrast", _auto_contrast),
    ("invert", lambda images, level, signs: 1.0 - images),
    ("rotate", _rotate),
    ("posterize", _posterize),
    ("solarize", _solarize),
    ("solarize_add", _solarize_add),
    ("color", functools.partial(_enhance, _grey)),
    ("contrast", functools.partial(
        _enhance, lambda images: tf.reduce_mean(_grey(images), axis=[1, 2, 3], keepdims=True))),
    ("brightness", functools.partial(_enhance, tf.zeros_like)),
    ("sharpness", functools.partial(_enhance, _smoothed)),
    ("shear_x", functools.partial(_shear, axis=0)),
    ("shear_y", functools.partial(_shear, axis=1)),
    ("translate_x", functools.partial(_shift, axis=0)),
    ("translate_y", functools.partial(_shift, axis=1)),
)
UNCHANGED = len(OPERATIONS)  # the draw of an image whose operation does not apply


def draw_operations(count, seed):
  """One layer's draws for a batch of `count` images: (int32 [count], each image's operation, or
  UNCHANGED where it does not apply; float32 [count], each image's sign). seed: int64 [2]."""
  applies, positive = tf.unstack(
      tf.random.stateless_uniform([2, count], seed) < [[OP_PROBABILITY], [0.5]])
  choices = tf.random.stateless_uniform([count], _fold(seed, 1), maxval=len(OPERATIONS), dtype=tf.int32)
  return tf.where(applies, choices, UNCHANGED), tf.where(positive, 1.0, -1.0)


def rand_augment(images, num_ops, magnitude, seed):
  """float32 [B, H, W, 3] in [0, 1] -> the same after num_ops operations of RandAugment at
  `magnitude` (0 to MAX_MAGNITUDE), drawn for each image on its own; seed: int64 [2], the batch's.
  Each operation runs once on the images that drew it (partitioned, then stitched back)."""
  level = magnitude / MAX_MAGNITUDE
  seed = _fold(seed, RANDAUGMENT)
  count = tf.shape(images)[0]
  for layer in range(num_ops):
    drawn, signs = draw_operations(count, _fold(seed, layer))
    places = tf.dynamic_partition(tf.range(count), drawn, UNCHANGED + 1)
    groups = tf.dynamic_partition(images, drawn, UNCHANGED + 1)
    group_signs = tf.dynamic_partition(signs, drawn, UNCHANGED + 1)
    results = [op(group, level, group_sign)
               for (_, op), group, group_sign in zip(OPERATIONS, groups, group_signs)]
    results.append(groups[UNCHANGED])
    shape = images.shape
    images = tf.dynamic_stitch(places, results)  # every operation leaves [0, 1]
    images.set_shape(shape)
  return images


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
