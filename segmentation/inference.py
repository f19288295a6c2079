"""Logits of whole images for evaluation and prediction: the image whole, or in overlapping windows
(eval.window, eval.stride), and test-time augmentation (eval.flip, eval.scales), averaged; then, with
eval.object_vote, one class per object (object_vote).

As mmsegmentation's `slide` mode: windows of window x window pixels every `stride` pixels, the last
of each row and column aligned to the image's edge, an image smaller than a window padded to it;
each pixel's logits are the sum over the windows that cover it divided by their count. As DeepLab's
multi-scale and flipped evaluation: the image resized by each scale (and mirrored), its logits
brought back to the image's size, and the variants' logits averaged.

Everything runs in TensorFlow inside the caller's tf.function, around `forward(images) -> logits`, a
function of uint8 images of any size (a checkpoint's model padded to its stride, or a SavedModel's
serving signature, which stays a whole-image graph).
"""
import dataclasses

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract import checks
from common.contract.errors import ConfigError
from segmentation import visualize

WINDOW_KEY = "eval.window"  # named where an image over data.eval_max_pixels is refused: it tiles it
MAX_SCALE = 4.0  # eval.scales' bound: at 4 an image has 16 times its pixels
CHECKS = {
    "eval.window": checks.NON_NEGATIVE_INT,  # 0 = whole images
    "eval.stride": checks.NON_NEGATIVE_INT,
    "eval.flip": checks.BOOL,
    "eval.scales": checks.sequence_of(
        checks.number(0, MAX_SCALE, low_open=True),
        f"a non-empty sequence of scales in (0, {MAX_SCALE:g}], e.g. (0.75, 1.0, 1.25)", non_empty=True),
    "eval.object_vote": checks.BOOL,
}


@dataclasses.dataclass(frozen=True)
class Inference:
  """The config's eval section, read once (read_inference), with data.eval_max_pixels, the pixels one
  call of the network may see (a whole image, or windows)."""
  window: int = 0
  stride: int = 0
  flip: bool = False
  scales: tuple = (1.0,)
  object_vote: bool = False
  max_pixels: int = 4096 * 2048

  @property
  def streams(self):
    """Whether a photo's class ids can be computed a strip of windows at a time (streamed_class_ids):
    windows without rescaling (a rescaled photo's logits are resized back as a whole) and without the
    vote (an object may span strips)."""
    return bool(self.window) and self.scales == (1.0,) and not self.object_vote

  def windows_per_call(self, batch=1):
    """The windows one call of the network takes from a batch of images: as many as max_pixels holds,
    at least one."""
    return tf.maximum(self.max_pixels // (self.window ** 2 * batch), 1)


def read_inference(config, max_pixels):
  """Inference of config.eval, every value checked: a ConfigError naming the key. max_pixels:
  data.eval_max_pixels, as the data settings read it (EvalSettings)."""
  checks.check_values(config, CHECKS)
  section = config.eval
  if section.stride and not section.window:
    raise ConfigError(f"eval.stride={section.stride} is the step between windows, and eval.window=0 evaluates "
                      "whole images: set eval.window too, or leave eval.stride at 0")
  if section.window and not 1 <= section.stride <= section.window:
    raise ConfigError(f"eval.stride={section.stride} must be in [1, eval.window={section.window}] (the step "
                      "between windows, e.g. two thirds of the window)")
  if section.window ** 2 > max_pixels:
    raise ConfigError(f"eval.window={section.window} is {section.window ** 2:,} pixels, more than "
                      f"data.eval_max_pixels={max_pixels:,}, the bound on what one call of the network sees")
  return Inference(section.window, section.stride, section.flip, tuple(section.scales), section.object_vote,
                   max_pixels)


def image_logits(forward, images, inference):
  """float32 logits [B, H, W, C] of uint8 images [B, H, W, 3]: each variant's (scales x flip) logits
  at the image's size, averaged (a running sum: one variant's logits held at a time); then, with
  inference.object_vote, object_vote's."""
  height, width = tf.shape(images)[1], tf.shape(images)[2]
  total, count = None, 0
  for scale in inference.scales:
    scaled = images
    if scale != 1.0:
      size = tf.cast(tf.round(tf.cast(tf.stack([height, width]), tf.float32) * scale), tf.int32)
      scaled = tf.cast(tf.round(tf.clip_by_value(tf.image.resize(images, tf.maximum(size, 1)), 0, 255)), tf.uint8)
    for flip in (False, True) if inference.flip else (False,):
      logits = _logits(forward, tf.reverse(scaled, [2]) if flip else scaled, inference)
      logits = tf.reverse(logits, [2]) if flip else logits
      logits = tf.image.resize(logits, [height, width]) if scale != 1.0 else logits
      total, count = logits if total is None else total + logits, count + 1
  total = total if count == 1 else total / count
  return object_vote(total) if inference.object_vote else total


def object_vote(logits):
  """Logits [B, H, W, C] whose argmax gives every pixel of an object the class most of the object's
  pixels take. An object: an 8-connected region of pixels whose argmax is not BACKGROUND. On the
  digit photos a network finds the digits (foreground-vs-background IoU 0.92) but calls parts of one
  digit different digits; the vote added 0.02 mIoU there, 0.04 on 100 training photos
  (segmentation/README.md). In each object pixel its top logit and the logit of its object's class
  trade places: its scores stay its own, in another order, and background pixels are untouched, so
  the objects' outlines stay the network's."""
  class_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
  objects = class_ids != visualize.BACKGROUND
  where = tf.where(objects)  # [n, 3]: the object pixels
  own = tf.gather_nd(class_ids, where)
  regions, member = tf.unique(connected_regions(objects))
  classes = tf.shape(logits)[-1]
  votes = tf.math.unsorted_segment_sum(tf.one_hot(own, classes, dtype=tf.int32), member, tf.size(regions))
  winner = tf.gather(tf.argmax(votes, axis=-1, output_type=tf.int32), member)
  scores = tf.gather_nd(logits, where)
  top, chosen = (tf.one_hot(ids, classes, True, False) for ids in (own, winner))
  swapped = tf.where(top, tf.gather(scores, winner, batch_dims=1)[:, None],
                     tf.where(chosen, tf.gather(scores, own, batch_dims=1)[:, None], scores))
  return tf.tensor_scatter_nd_update(logits, where, swapped)


def connected_regions(mask):
  """int32 [n]: for each of the n pixels of bool mask [B, H, W], in row-major order (tf.where's), the
  place among them of the last pixel of its 8-connected region. Each pixel starts labelled with its
  own place; each step takes the largest label among a pixel's neighbours, hands it to the pixel its
  label names too (hooking: a whole tree of labels moves at once), then follows the chain of labels
  (the label that the label's pixel holds, and so on). A label is always a pixel of its region, so
  labels only grow. Without the hook a maze of 8-pixel blocks took 141 steps, with it 6 (a 250x188
  photo: 0.33 against 0.02 CPU s)."""
  shape = tf.shape(mask)
  # Flat indices into the mask with a rim of one pixel around each image: a neighbour is an offset away.
  rimmed = tf.pad(mask, [[0, 0], [1, 1], [1, 1]])
  at = tf.cast(tf.where(tf.reshape(rimmed, [-1]))[:, 0], tf.int32)  # the mask's pixels, in flat order
  count, row = tf.size(at), shape[2] + 2
  # Each flat index's place among the mask's pixels; count off the mask, where the labels' appended -1 is.
  place = tf.tensor_scatter_nd_update(tf.fill([tf.size(rimmed)], count), at[:, None], tf.range(count))
  offsets = tf.reshape(tf.range(-1, 2)[:, None] * row + tf.range(-1, 2)[None, :], [-1])
  neighbours = tf.gather(place, at[:, None] + offsets[None, :])  # [n, 9]

  def step(labels, _):
    grown = tf.reduce_max(tf.gather(tf.concat([labels, [-1]], 0), neighbours), -1)
    hooked = tf.tensor_scatter_nd_max(grown, labels[:, None], grown)
    once = tf.gather(hooked, hooked)
    jumped = tf.gather(once, once)  # four links of the chain followed
    return jumped, tf.reduce_any(jumped != labels)

  labels, _ = tf.while_loop(lambda _, changed: changed, step, [tf.range(count), tf.constant(True)])
  return labels


def _logits(forward, images, inference):
  return sliding_logits(forward, images, inference) if inference.window else tf.cast(forward(images), tf.float32)


def window_starts(size, window, stride):
  """The first row (or column) of each window along a side of `size` >= window: every `stride`
  pixels, the last one ending at the edge."""
  count = (size - window + stride - 1) // stride + 1
  return tf.minimum(tf.range(count) * stride, size - window)


def sliding_logits(forward, images, inference):
  """Logits of images in windows of inference.window every inference.stride pixels, summed over the
  windows that cover each pixel and divided by their count; as many windows per call of forward as
  inference.max_pixels holds (at least one)."""
  window = inference.window
  height, width, batch = tf.shape(images)[1], tf.shape(images)[2], tf.shape(images)[0]
  # Smaller than a window: padded at the bottom and right (as the forward pads to the stride).
  padded_h, padded_w = tf.maximum(height, window), tf.maximum(width, window)
  images = tf.pad(images, [[0, 0], [0, padded_h - height], [0, padded_w - width], [0, 0]])
  rows, cols = (window_starts(size, window, inference.stride) for size in (padded_h, padded_w))
  starts = tf.reshape(tf.stack(tf.meshgrid(rows, cols, indexing="ij"), axis=-1), [-1, 2])
  offsets = tf.range(window)
  batch_index = tf.range(batch)[None, :, None, None, None]
  per_call = inference.windows_per_call(batch)

  def indices(chunk):  # [n, window, window, 2]: the (row, column) of each pixel of each window
    shape = [tf.shape(chunk)[0], window, window]
    return tf.stack([tf.broadcast_to(chunk[:, 0, None, None] + offsets[None, :, None], shape),
                     tf.broadcast_to(chunk[:, 1, None, None] + offsets[None, None, :], shape)], axis=-1)

  def chunk_logits(first):  # (the indices of the windows from `first` on, their logits [n, w, w, B, C])
    where = indices(starts[first:first + per_call])
    # Gathered [n, B, w, w, 3] straight from the images: a uint8 transpose (Grappler moves a cast
    # across one) makes oneDNN print that it needs AVX-512.
    shape = tf.concat([tf.shape(where)[:1], [batch, window, window, 1]], 0)
    at = tf.concat([tf.broadcast_to(batch_index, shape),
                    tf.broadcast_to(where[:, None], tf.concat([shape[:-1], [2]], 0))], -1)
    crops = tf.reshape(tf.gather_nd(images, at), [-1, window, window, 3])
    logits = tf.cast(forward(crops), tf.float32)
    logits = tf.reshape(logits, [-1, batch, window, window, tf.shape(logits)[-1]])
    return where, tf.transpose(logits, [0, 2, 3, 1, 4])

  def add_chunk(first, total):
    return first + per_call, tf.tensor_scatter_nd_add(total, *chunk_logits(first))

  # The first chunk starts the sum (the class count is the network's).
  where, logits = chunk_logits(0)
  total = tf.scatter_nd(where, logits, tf.concat([[padded_h, padded_w, batch], tf.shape(logits)[-1:]], 0))
  _, total = tf.while_loop(lambda first, _: first < tf.shape(starts)[0], add_chunk, [per_call, total])
  # Windows form a grid, so a pixel's count is its row's count times its column's.
  counts = [tf.scatter_nd(tf.reshape(starts_1d[:, None] + offsets, [-1, 1]), tf.ones([tf.size(starts_1d) * window]),
                          [size]) for starts_1d, size in ((rows, padded_h), (cols, padded_w))]
  total /= (counts[0][:, None] * counts[1][None, :])[:, :, None, None]
  return tf.transpose(total[:height, :width], [2, 0, 1, 3])


def streamed_class_ids(logits, image, inference):
  """uint8 class ids [H, W] of one uint8 photo [H, W, 3], as the argmax of image_logits in windows
  gives them, computed a strip of inference.window rows at a time (inference.streams): logits(strip)
  is image_logits of the strip [1, window, W, 3] (one row of windows, flipped too with eval.flip),
  and the strips' logits are summed where they overlap. Held: one strip's logits (window x W x
  classes floats), never the photo's. A pixel's sum and its average (the sum over its count of
  windows) have the same argmax, so no count is kept."""
  height, window = image.shape[0], inference.window
  starts = window_starts(max(height, window), window, inference.stride).numpy()
  class_ids = np.empty(image.shape[:2], np.uint8)
  every = max(len(starts) // 10, 16)  # a line every tenth of a large photo
  total, top = None, 0  # the sums of rows top.. (those a later strip may still add to)
  for k, start in enumerate(starts):
    strip = logits(tf.convert_to_tensor(image[None, start:start + window]))[0].numpy()
    if total is None:
      total = strip
    else:  # rows above this strip are done: their ids out, the sum moves down
      done = start - top
      class_ids[top:start] = np.argmax(total[:done], axis=-1)
      total = np.concatenate([total[done:], np.zeros_like(total[:done])]) + strip
    top = start
    if (k + 1) % every == 0:
      logging.info("rows %d of %d predicted", start, height)
  class_ids[top:] = np.argmax(total, axis=-1)
  return class_ids
