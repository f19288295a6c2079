"""segmentation/augment.py through the training pipeline: image and mask stay aligned, the same seed
gives the same patches (and a restored iterator the uninterrupted ones), masks hold only their labels
or the ignore label, and everything off is the pipeline without augmentation."""
import numpy as np
import pytest
import tensorflow as tf

from common.data import pipeline
from segmentation import augment
from segmentation import input_pipeline

IGNORE = 255
SQUARE_LABEL = 3
BACKGROUND_RGB, SQUARE_RGB = (40, 40, 40), (230, 90, 20)
PATCH = 24
GEOMETRIC = {"scale": augment.Augmentation(scale_range=(0.5, 2.0)),
             "crop_padding": augment.Augmentation(crop_padding=10),
             "flip": augment.Augmentation(flip=True),
             "rotation": augment.Augmentation(rotation=30.0),
             "all": augment.Augmentation(scale_range=(0.5, 2.0), crop_padding=10, flip=True, rotation=30.0)}
PHOTOMETRIC = augment.Augmentation(brightness=0.2, contrast=0.5, saturation=0.5, hue=0.1)


def square_scene():
  """A 30x36 scene: an off-centre square whose colour and label coincide, a few labelled strokes
  (labels 0, 1, 3) and a row of ignored pixels, so that every flip and shift shows."""
  image = np.full((30, 36, 3), BACKGROUND_RGB, np.uint8)
  mask = np.zeros((30, 36), np.uint8)
  image[6:16, 4:13], mask[6:16, 4:13] = SQUARE_RGB, SQUARE_LABEL
  mask[22:25, 20:34] = 1  # image: background colour, so it counts as not square
  mask[28, :] = IGNORE
  return image, mask


def train_patches(augmentation, seed=0, batches=4, patches_per_image=2):
  """(images, masks) of the first batches of make_train over the square scene, repeated."""
  image, mask = square_scene()
  source = input_pipeline.Source(lambda _: tf.data.Dataset.from_tensors((image, mask)).repeat(), 1, None)
  dataset = input_pipeline.make_train(source, 4, seed, patch_size=PATCH, patches_per_image=patches_per_image,
                                      shuffle_buffer=8, ignore_label=IGNORE, augmentation=augmentation)
  images, masks = zip(*[(i.numpy(), m.numpy()) for i, m in dataset.take(batches)])
  return np.concatenate(images), np.concatenate(masks)


def coloured_as_square(images):
  """Pixels nearer the square's colour than the background's (padding, black, is not)."""
  distance = lambda rgb: np.abs(images.astype(np.int32) - rgb).sum(axis=-1)
  return distance(SQUARE_RGB) < distance(BACKGROUND_RGB)


def edge_band(region):
  """Pixels of a boolean [N, h, w] region or beside it (8-neighbourhood) where it changes."""
  padded = np.pad(region, ((0, 0), (1, 1), (1, 1)), mode="edge")
  h, w = region.shape[1:]
  shifted = [padded[:, 1 + dy:1 + dy + h, 1 + dx:1 + dx + w] for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
  return np.any([s != region for s in shifted], axis=0)


@pytest.mark.parametrize("name", GEOMETRIC)
def test_the_square_stays_where_its_label_is(name):
  images, masks = train_patches(GEOMETRIC[name], batches=8)
  labelled, coloured = masks == SQUARE_LABEL, coloured_as_square(images)
  assert labelled.any(axis=(1, 2)).sum() >= 4  # the square is in most patches
  if name in ("scale", "rotation", "all"):
    # A bilinear pixel at the square's edge blends it with the background (at a corner less than
    # half of it may be square) where the nearest-neighbour label is the square's: they may differ
    # there and nowhere else.
    assert not (labelled != coloured)[~edge_band(labelled)].any()
    assert (labelled == coloured).mean() > 0.99
  else:  # moved whole pixels: exactly alike
    np.testing.assert_array_equal(labelled, coloured)


@pytest.mark.parametrize("name", GEOMETRIC)
def test_masks_hold_only_their_labels_or_the_ignore_label(name):
  _, masks = train_patches(GEOMETRIC[name], batches=8)
  assert set(np.unique(masks)) <= {0, 1, SQUARE_LABEL, IGNORE}


def test_each_augmentation_changes_what_it_says():
  plain_images, plain_masks = train_patches(augment.Augmentation(), batches=8)
  square_size = lambda masks: (masks == SQUARE_LABEL).sum(axis=(1, 2))
  # Scale: square areas from a quarter to four times the 90 pixels (cut by the crop at most).
  scaled = square_size(train_patches(GEOMETRIC["scale"], batches=8)[1])
  assert scaled.min() < 60 and scaled.max() > 120 and square_size(plain_masks).max() <= 90
  # Crop padding: some patches hold the ignore label beyond the scene's row of it.
  padded = train_patches(GEOMETRIC["crop_padding"], batches=8)[1]
  assert ((padded == IGNORE).sum(axis=(1, 2)) > PATCH).any() and not ((plain_masks == IGNORE).sum(
      axis=(1, 2)) > PATCH).any()
  # Flip: the square's left edge is further right in some patches than any unflipped crop can put it.
  left_edge = lambda masks: [np.nonzero(m == SQUARE_LABEL)[1].min() for m in masks if (m == SQUARE_LABEL).any()]
  assert max(left_edge(train_patches(GEOMETRIC["flip"], batches=8)[1])) > max(left_edge(plain_masks))
  # Rotation: a turned square fills less of the rows and columns it spans; an upright one all of them.
  def fill(masks):
    square = [m == SQUARE_LABEL for m in masks if (m == SQUARE_LABEL).sum() > 20]
    return [s.sum() / (np.ptp(np.nonzero(s)[0]) + 1) / (np.ptp(np.nonzero(s)[1]) + 1) for s in square]
  assert min(fill(train_patches(GEOMETRIC["rotation"], batches=8)[1])) < 0.8 and min(fill(plain_masks)) == 1
  # Photometric: the images change, the masks and the places of the crops do not.
  images, masks = train_patches(PHOTOMETRIC, batches=8)
  np.testing.assert_array_equal(masks, plain_masks)
  assert images.dtype == np.uint8 and not np.array_equal(images, plain_images)


def test_the_same_seed_gives_the_same_patches_and_another_seed_others():
  everything = augment.Augmentation(scale_range=(0.5, 2.0), crop_padding=6, flip=True, rotation=20.0,
                                    brightness=0.2, contrast=0.5, saturation=0.5, hue=0.1)
  first, again, other = (train_patches(everything, seed) for seed in (7, 7, 8))
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(first[0], other[0])


def test_a_restored_iterator_continues_with_the_uninterrupted_patches(tmp_path):
  everything = augment.Augmentation(scale_range=(0.5, 2.0), crop_padding=6, flip=True, rotation=20.0,
                                    brightness=0.2, contrast=0.5, saturation=0.5, hue=0.1)
  image, mask = square_scene()
  source = input_pipeline.Source(lambda _: tf.data.Dataset.from_tensors((image, mask)).repeat(), 1, None)
  make = lambda: iter(input_pipeline.make_train(source, 4, 3, patch_size=PATCH, patches_per_image=2,
                                                shuffle_buffer=8, ignore_label=IGNORE,
                                                augmentation=everything))
  uninterrupted = make()
  expected = [next(uninterrupted) for _ in range(6)][3:]
  interrupted = make()
  for _ in range(3):
    next(interrupted)
  path = tf.train.Checkpoint(iterator=interrupted).write(str(tmp_path / "input"))
  resumed = make()
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  for want in expected:
    got = next(resumed)
    for a, b in zip(want, got):
      np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_all_off_is_the_crop_alone():
  image, mask = square_scene()
  seed = tf.constant([0, 5], tf.int64)
  got = augment.patches(image, mask, augment.Augmentation(), PATCH, 2, seed, IGNORE)
  want = pipeline.sample_patches(image, mask, PATCH, 2, seed, IGNORE)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)


def test_a_fixed_half_scale_halves_the_scene_inside_the_ignore_label():
  image, mask = square_scene()
  images, masks = augment.random_patches(image, mask, augment.Augmentation(scale_range=(0.5, 0.5)), PATCH, 1,
                                         tf.constant([0, 1], tf.int64), IGNORE)
  image, mask = images.numpy()[0], masks.numpy()[0]
  # The 30x36 scene became 15x18, somewhere inside the 24x24 patch; the rest is padding.
  rows, cols = np.nonzero(mask != IGNORE)
  top, left = rows.min(), cols.min()
  assert (rows.max() - top + 1, cols.max() - left + 1) == (15, 18) and (mask != IGNORE).sum() == 15 * 18
  assert not image[mask == IGNORE].any()
  # Pixel j samples the scene between its pixels 2j and 2j + 1 (the label of 2j + 1): the square's
  # rows 6-15 and columns 4-12 become 3-7 and 2-5.
  rows, cols = np.nonzero(mask == SQUARE_LABEL)
  assert (rows.min() - top, rows.max() - top, cols.min() - left, cols.max() - left) == (3, 7, 2, 5)
