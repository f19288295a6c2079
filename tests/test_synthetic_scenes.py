"""The default synthetic scenes: their classes are told apart by shape and texture, not by colour."""
import glob
import os

import numpy as np
from PIL import Image

from helpers import make_config
from segmentation import metrics
from segmentation import synthetic

LEVELS = 16  # per channel: 4,096 colour bins, each seen ~200 times in the 819,200 training pixels


def read_split(images_dir, masks_dir):
  """([N, H, W, 3] images, [N, H, W] class ids) of a folder of scenes."""
  images = [np.array(Image.open(path)) for path in sorted(glob.glob(os.path.join(images_dir, "*.png")))]
  masks = [np.array(Image.open(path)) for path in sorted(glob.glob(os.path.join(masks_dir, "*.png")))]
  return np.stack(images), np.stack(masks)


def colour_lookup_scores(train, held_out, num_classes):
  """Metrics of the best per-pixel colour classifier: each quantized RGB -> its majority class in
  `train`, scored on `held_out` (a colour never seen in training is called background)."""
  def bins(images):
    q = images.astype(np.int64) * LEVELS // 256
    return ((q[..., 0] * LEVELS + q[..., 1]) * LEVELS + q[..., 2]).ravel()
  counts = np.zeros((LEVELS ** 3, num_classes), np.int64)
  np.add.at(counts, (bins(train[0]), train[1].ravel()), 1)
  predicted = counts.argmax(1)[bins(held_out[0])]
  confusion = np.zeros((num_classes, num_classes), np.int64)
  np.add.at(confusion, (held_out[1].ravel(), predicted), 1)
  return metrics.metrics_from_confusion(confusion)


def test_default_scenes_are_not_separable_by_colour(tmp_path):
  cfg = make_config("segmentation", "default")
  data = cfg.data
  folders = synthetic.write_scenes(str(tmp_path), cfg.seed, data.image_size, data.num_train_images,
                                   data.num_eval_images, data.num_classes)
  train, held_out = read_split(*folders["train"]), read_split(*folders["eval"])
  scores = colour_lookup_scores(train, held_out, data.num_classes)
  print(f"colour lookup on the default scenes: mIoU {scores['miou']:.3f} "
        f"(all-background {scores['chance_miou']:.3f})")
  # The main job reaches 0.93 (tests/test_segmentation_train.py); colour alone stays near chance.
  assert scores["miou"] < 0.3
  assert scores["miou"] < scores["chance_miou"] + 0.1
  # The same classifier does read the classes off scenes whose colour tells them (one fixed colour
  # per class, as the scenes were drawn before): so the figure above is the colours', not a broken
  # classifier's.
  class_colours = np.random.default_rng(0).integers(0, 256, size=(data.num_classes, 3))
  rng = np.random.default_rng(1)

  def coloured(split):
    noise = rng.normal(0, 10, size=split[0].shape)
    return np.clip(class_colours[split[1]] + noise, 0, 255).astype(np.uint8), split[1]
  assert colour_lookup_scores(coloured(train), coloured(held_out), data.num_classes)["miou"] > 0.95


def test_every_class_takes_colours_from_across_the_range():
  """Each class's instances (the background too) get colours spread over the RGB cube."""
  rng = np.random.default_rng(0)
  instance_means = {label: [] for label in range(len(synthetic.CLASS_NAMES))}
  for _ in range(40):
    image, labels = synthetic.draw_scene(64, 5, rng)
    for label in np.unique(labels):
      instance_means[label].append(image[labels == label].mean(axis=0))
  for label, means in instance_means.items():
    means = np.array(means)
    assert len(means) >= 10, label
    # Uniform over 185 levels has a standard deviation of 53 per channel.
    assert np.all(means.std(axis=0) > 35), (label, means.std(axis=0))
