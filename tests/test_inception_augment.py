"""The classifier's timm augmentations (inception_finetune/augment.py): mixup and CutMix against
hand-computed batches, RandAugment's operations, the soft-label loss, and the same batches on a
resumed pipeline."""
import numpy as np
import pytest
import tensorflow as tf

from common.contract.errors import DataError
from inception_finetune import augment
from inception_finetune import losses
import test_inception_data

SEED = tf.constant([7, 3], tf.int64)


def test_mixup_is_the_hand_computed_blend_of_two_images_and_their_labels():
  images = np.random.default_rng(0).uniform(-1, 1, [2, 5, 6, 3]).astype(np.float32)
  mixing = augment.Mixing(mixup_alpha=0.4)
  weight, share = (t.numpy() for t in augment.draw_mix(mixing, 5, 6, SEED))
  lam = float(share)
  assert 0 < lam < 1 and weight.shape == (5, 6, 1) and np.all(weight == lam)
  mixed, targets = augment.mix_batch(tf.constant(images), tf.constant([0, 2]), 3, mixing, SEED)
  np.testing.assert_allclose(mixed, lam * images + (1 - lam) * images[::-1], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(targets, [[lam, 0, 1 - lam], [1 - lam, 0, lam]], rtol=1e-6)
  # mix_prob 0: the batch as it was, one-hot labels.
  mixed, targets = augment.mix_batch(tf.constant(images), tf.constant([0, 2]), 3,
                                     augment.Mixing(mixup_alpha=0.4, prob=0.0), SEED)
  np.testing.assert_array_equal(mixed, images)
  np.testing.assert_array_equal(targets, [[1, 0, 0], [0, 0, 1]])


def test_cutmix_pastes_the_partners_box_where_drawn_and_weights_labels_by_its_area():
  batch, height, width = 3, 9, 12
  images = np.stack([np.full([height, width, 3], 0.1 * (i + 1), np.float32) for i in range(batch)])
  labels = np.array([0, 1, 2])
  mixing = augment.Mixing(cutmix_alpha=1.0)
  areas = []
  for draw in range(6):
    seed = tf.constant([draw, 1], tf.int64)
    weight, share = (t.numpy() for t in augment.draw_mix(mixing, height, width, seed))
    box = weight[..., 0] == 0
    assert set(np.unique(weight)) <= {0.0, 1.0}
    area = box.mean()
    if box.any():  # a rectangle: its bounding box is all of it
      rows, cols = np.flatnonzero(box.any(axis=1)), np.flatnonzero(box.any(axis=0))
      assert box[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].all()
    assert share == pytest.approx(1 - area, abs=1e-6)
    mixed, targets = (t.numpy() for t in augment.mix_batch(tf.constant(images), tf.constant(labels), 3,
                                                           mixing, seed))
    for i in range(batch):
      partner = batch - 1 - i
      np.testing.assert_array_equal(mixed[i][box], images[partner][box])
      np.testing.assert_array_equal(mixed[i][~box], images[i][~box])
      expected = np.zeros(3)
      expected[labels[i]] += 1 - area
      expected[labels[partner]] += area
      np.testing.assert_allclose(targets[i], expected, atol=1e-6)
    areas.append(area)
  assert len(set(areas)) > 2 and max(areas) > 0.1  # boxes of several sizes were drawn


def test_mix_draws_follow_beta_mix_prob_and_switch_prob():
  def draws(mixing, count=300):
    return [tuple(t.numpy() for t in augment.draw_mix(mixing, 8, 8, tf.constant([s, 5], tf.int64)))
            for s in range(count)]

  found = draws(augment.Mixing(mixup_alpha=0.2, prob=0.75))
  shares = np.array([float(share) for _, share in found])
  mixed = shares[shares != 1.0]
  assert abs(len(mixed) / len(shares) - 0.75) < 0.08
  # Beta(0.2, 0.2): mean 1/2, variance 1 / (4 (2 alpha + 1)) = 0.179, mostly near 0 or 1.
  assert abs(mixed.mean() - 0.5) < 0.08 and abs(mixed.var() - 0.179) < 0.03
  found = draws(augment.Mixing(mixup_alpha=0.2, cutmix_alpha=1.0, switch_prob=0.3))
  boxes = sum(len(np.unique(weight)) == 2 for weight, _ in found)  # CutMix: 0 in the box, 1 outside
  assert abs(boxes / len(found) - 0.3 * 0.94) < 0.08  # ~6% of boxes are empty (lambda near 1)


def unit_images(seed=0, shape=(3, 12, 16, 3)):
  """Images on the 1/255 grid, as decoded pixels are, short of black and white (auto_contrast)."""
  return tf.constant(np.random.default_rng(seed).integers(40, 200, shape) / 255.0, tf.float32)


def test_randaugment_operations_do_nothing_at_level_0_and_change_each_image_at_the_top():
  images = unit_images()
  signs = tf.constant([-1.0, 1.0, -1.0])
  for name, op in augment.OPERATIONS:
    top = op(images, 1.0, signs).numpy()
    assert top.shape == images.shape and np.isfinite(top).all(), name
    assert 0.0 <= top.min() and top.max() <= 1.0, name  # RandAugment stitches results unclipped
    assert (np.abs(top - images.numpy()).max(axis=(1, 2, 3)) > 0.05).all(), name
    # An image's result does not depend on the others in its batch.
    np.testing.assert_allclose(top[1:2], op(images[1:2], 1.0, signs[1:2]), atol=1e-6, err_msg=name)
    if name not in ("auto_contrast", "invert"):  # they have no strength
      np.testing.assert_allclose(op(images, 0.0, signs), images, atol=1e-5, err_msg=name)
  # A sign turns a geometric operation the other way: rotating a ramp (which bilinear sampling
  # keeps exactly) by +30 then by -30 degrees gives it back in the middle.
  rows, cols = np.mgrid[0:12, 0:16]
  ramp = tf.constant(np.broadcast_to((0.2 + 0.02 * cols + 0.03 * rows)[None, ..., None], [1, 12, 16, 3]),
                     tf.float32)
  rotate = dict(augment.OPERATIONS)["rotate"]
  back = rotate(rotate(ramp, 1.0, tf.constant([1.0])), 1.0, tf.constant([-1.0]))
  np.testing.assert_allclose(back[0, 4:8, 6:10], ramp[0, 4:8, 6:10], atol=1e-4)


def test_randaugment_gives_each_image_the_operations_it_drew():
  images = unit_images(1, (16, 12, 16, 3))
  seed = tf.constant([5, 0], tf.int64)
  result = augment.rand_augment(images, 2, 10, seed).numpy()
  # The same draws applied to one image at a time, in order.
  layer_seeds = [augment._fold(augment._fold(seed, augment.RANDAUGMENT), layer) for layer in range(2)]
  draws = [augment.draw_operations(16, s) for s in layer_seeds]
  assert len({int(d) for drawn, _ in draws for d in drawn}) > 6  # many operations in one batch
  for i in range(16):
    image = images[i:i + 1]
    for drawn, signs in draws:
      if int(drawn[i]) != augment.UNCHANGED:
        image = augment.OPERATIONS[int(drawn[i])][1](image, 1.0, signs[i:i + 1])
    np.testing.assert_allclose(result[i], image[0], atol=1e-6, err_msg=str(i))


def test_randaugment_keeps_shape_dtype_and_range_and_is_seeded():
  images = unit_images(1)
  results = [augment.rand_augment(images, 3, 10, tf.constant([s, 0], tf.int64)) for s in range(8)]
  for result in results:
    assert result.shape == images.shape and result.dtype == tf.float32
    assert 0.0 <= result.numpy().min() and result.numpy().max() <= 1.0
  again = augment.rand_augment(images, 3, 10, tf.constant([0, 0], tf.int64))
  np.testing.assert_array_equal(again, results[0])
  assert len({r.numpy().tobytes() for r in results}) > 4  # other seeds, other operations
  np.testing.assert_array_equal(augment.rand_augment(images, 0, 10, tf.constant([0, 0], tf.int64)), images)


def test_the_loss_takes_soft_labels_and_smooths_them_on_top():
  logits = tf.constant([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0]])
  log_probs = tf.nn.log_softmax(logits).numpy()
  soft = np.array([[0.7, 0.0, 0.3], [0.0, 1.0, 0.0]], np.float32)
  smoothed = soft * 0.9 + 0.1 / 3
  expected = -(smoothed * log_probs).sum(axis=1).mean()
  got = losses.classification_loss(tf.constant(soft), logits, 3, label_smoothing=0.1)
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  # One-hot soft labels give the integer labels' loss.
  np.testing.assert_allclose(losses.classification_loss(tf.one_hot([1, 1], 3), logits, 3, 0.1),
                             losses.classification_loss(tf.constant([1, 1]), logits, 3, 0.1), rtol=1e-6)
  with pytest.raises(DataError, match=r"float labels have shape \(2, 4\): soft labels are \[batch, 3\]"):
    losses.classification_loss(tf.zeros([2, 4]), logits, 3)


def test_the_same_seed_and_position_give_the_same_mixed_batch_after_a_resume(tmp_path):
  root = test_inception_data.write_class_folders(tmp_path / "images", [6, 6, 6])
  cfg = test_inception_data.data_config(source="folder", train_dir=root, randaugment_ops=2,
                                        mixup_alpha=0.4, cutmix_alpha=1.0)
  data = test_inception_data.make_datasets(cfg, 4, seed=3)
  iterator = iter(data.train)
  batches = [next(iterator) for _ in range(4)]
  images, labels = batches[0]
  assert images.shape == (4, test_inception_data.SIZE, test_inception_data.SIZE, 3)
  assert labels.dtype == tf.float32 and labels.shape == (4, 3)
  np.testing.assert_allclose(tf.reduce_sum(labels, axis=1), 1.0, rtol=1e-6)
  assert -1 <= images.numpy().min() and images.numpy().max() <= 1
  # An iterator saved after two batches and restored into a new pipeline goes on with the third.
  resumed = iter(data.new_train())
  saved = iter(data.new_train())
  next(saved), next(saved)
  path = tf.train.Checkpoint(iterator=saved).write(str(tmp_path / "position"))
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  for expected in batches[2:]:
    for got, want in zip(next(resumed), expected):
      np.testing.assert_array_equal(got, want)
  other = next(iter(test_inception_data.make_datasets(cfg, 4, seed=4).train))
  assert not np.array_equal(other[0], images)
