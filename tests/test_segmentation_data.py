"""Tests of segmentation/data.py, sources.py, synthetic.py, visualize.py and scripts/convert_to_tfrecord.py."""
import dataclasses
import logging
import os
import re
import subprocess
import sys
from unittest import mock

import ml_collections
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import listing
from common.data import pipeline
from common.data import sources
from common.data import tfrecords
import helpers
from scripts import convert_to_tfrecord
from segmentation import augment as augment_lib
from segmentation import class_masks
from segmentation import data as seg_data
from segmentation import sources as seg_sources
from segmentation import synthetic
from segmentation import visualize

# The data fields of configs/segmentation.py, sized for tests.
DEFAULTS = dict(
    source="synthetic", num_classes=5, ignore_label=255, patch_size=8, patches_per_image=4,
    augment=dict(scale_range=(1.0, 1.0), crop_padding=0, flip=False, rotation=0.0, brightness=0.0,
                 contrast=0.0, saturation=0.0, hue=0.0),
    skip_bad_files=False, duplicates="error", shuffle_buffer=64, eval_batch_size=16,
    eval_max_pixels=4096 * 2048, eval_fraction=0.25, class_names=(), cache_dir="", image_size=24,
    num_train_images=6, num_eval_images=3, images_dir="", masks_dir="", train_split="",
    eval_split="", voc_root="", train_pattern="", eval_pattern="", train_images="", train_labels="",
    eval_images="", eval_labels="", npy_pixel_max=255.0, normalization="unit", tfds_name="", tfds_data_dir="",
    tfds_train_split="train", tfds_eval_split="test", tfds_download=False)

# Folder fixtures encode each pixel's class in the red channel, so that labels
# can be recomputed from the images after cropping.
RED_OF_CLASS = {0: 10, 1: 60, 2: 110, 3: 160, 4: 210, 255: 5}
CLASS_OF_RED = {red: label for label, red in RED_OF_CLASS.items()}


def make_cfg(**overrides):
  cfg = ml_collections.ConfigDict(DEFAULTS)
  cfg.update(overrides)
  return cfg


def make_datasets(cfg, *args, for_training=True, **kwargs):
  """seg_data.make_datasets of the settings of cfg, a data section (read_settings: checked first)."""
  return seg_data.make_datasets(seg_data.read_settings(cfg, for_training), *args, for_training=for_training,
                                **kwargs)


def random_mask(rng, height, width):
  """Blocks of classes 0..4 with a few ignore pixels."""
  mask = np.zeros((height, width), np.uint8)
  for _ in range(4):
    y, x = rng.integers(0, height), rng.integers(0, width)
    mask[y:y + rng.integers(3, 9), x:x + rng.integers(3, 9)] = rng.integers(1, 5)
  mask[rng.integers(0, height), :] = 255
  return mask


def image_of_mask(mask, rng):
  image = rng.integers(0, 256, size=mask.shape + (3,), dtype=np.uint8)
  image[..., 0] = np.vectorize(RED_OF_CLASS.get)(mask)
  return image


def write_folder(root, sizes, seed=0, image_ext=".png"):
  """images/ and masks/ with one color-coded pair per size; returns (images_dir, masks_dir, masks)."""
  rng = np.random.default_rng(seed)
  images_dir, masks_dir = root / "images", root / "masks"
  images_dir.mkdir(parents=True)
  masks_dir.mkdir(parents=True)
  masks = []
  for i, (height, width) in enumerate(sizes):
    mask = random_mask(rng, height, width)
    Image.fromarray(image_of_mask(mask, rng)).save(images_dir / f"img{i:03d}{image_ext}")
    Image.fromarray(mask).save(masks_dir / f"img{i:03d}.png")
    masks.append(mask)
  return str(images_dir), str(masks_dir), masks


def write_split_files(root, train_ids, eval_ids):
  for name, ids in (("train.txt", train_ids), ("eval.txt", eval_ids)):
    (root / name).write_text("".join(f"{i}\n" for i in ids))
  return str(root / "train.txt"), str(root / "eval.txt")


def labels_from_colors(images):
  """The class of every pixel of images of write_folder."""
  return np.vectorize(lambda r: CLASS_OF_RED.get(r, -1))(images[..., 0])


def first_batch(dataset):
  images, labels = next(iter(dataset))
  return images.numpy(), labels.numpy()


def eval_labels(data):
  return [labels.numpy()[0] for _, labels in data.eval]


def test_synthetic_scenes_have_the_promised_shapes_and_ranges(tmp_path):
  data = make_datasets(make_cfg(), batch_size=10, seed=3, workdir=str(tmp_path))
  images, labels = first_batch(data.train)
  assert images.shape == (10, 8, 8, 3) and images.dtype == np.uint8
  assert labels.shape == (10, 8, 8) and labels.dtype == np.int32
  assert images.max() > 150  # not all dark: scenes have bright shapes
  assert set(np.unique(labels)) <= set(range(5))
  eval_batches = list(data.eval)
  assert len(eval_batches) == 1  # three 24x24 scenes in one batch, whole and unpadded
  eval_images, eval_labels_ = eval_batches[0]
  assert eval_images.shape == (3, 24, 24, 3) and eval_labels_.shape == (3, 24, 24)
  assert eval_labels_.dtype == np.int32 and set(np.unique(eval_labels_)) <= set(range(5))
  assert data.num_classes == 5 and data.num_eval_images == 3
  assert data.class_names == synthetic.CLASS_NAMES


def test_synthetic_scenes_are_deterministic_and_cached(tmp_path):
  cfg = make_cfg(cache_dir=str(tmp_path / "cache"))
  first = first_batch(make_datasets(cfg, 8, seed=5).train)
  (folder,) = os.listdir(tmp_path / "cache")
  written = os.path.getmtime(tmp_path / "cache" / folder / "train" / "images" / "00000.png")
  again = first_batch(make_datasets(cfg, 8, seed=5).train)
  np.testing.assert_array_equal(first[0], again[0])
  np.testing.assert_array_equal(first[1], again[1])
  assert os.path.getmtime(tmp_path / "cache" / folder / "train" / "images" / "00000.png") == written
  other = first_batch(make_datasets(cfg, 8, seed=6).train)
  assert not np.array_equal(first[0], other[0])
  assert len(os.listdir(tmp_path / "cache")) == 2


def test_synthetic_scene_draws_every_class():
  image, labels = synthetic.draw_scene(64, 5, np.random.default_rng(0))
  assert image.shape == (64, 64, 3) and image.dtype == np.uint8
  counts = np.zeros(5, int)
  for seed in range(5):
    counts += np.bincount(synthetic.draw_scene(64, 5, np.random.default_rng(seed))[1].ravel(), minlength=5)
  assert np.all(counts > 0)  # colours tell no class: tests/test_synthetic_scenes.py


def test_folder_patches_stay_aligned_with_their_masks(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(20, 24)] * 6)
  cfg = make_cfg(source="folder", images_dir=images_dir, masks_dir=masks_dir, patch_size=12)
  data = make_datasets(cfg, batch_size=16, seed=0)
  for images, labels in data.train.take(3):
    labels = labels.numpy()
    assert images.shape == (16, 12, 12, 3)
    assert np.array_equal(labels_from_colors(images.numpy()), labels)
    assert np.any(labels == 255) and np.any((labels > 0) & (labels < 5))


def test_folder_eval_keeps_whole_images_at_their_own_sizes(tmp_path, caplog):
  sizes = [(20, 24), (17, 9), (12, 30)]
  images_dir, masks_dir, masks = write_folder(tmp_path, sizes)
  train_split, eval_split = write_split_files(tmp_path, ["img000"], ["img000", "img001", "img002"])
  # img000 in both splits: an error unless data.duplicates='warn', which keeps it in both.
  cfg = make_cfg(source="folder", images_dir=images_dir, masks_dir=masks_dir, train_split=train_split,
                 eval_split=eval_split, duplicates="warn")
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, batch_size=4, seed=0)
  assert f"{eval_split}:1: image id 'img000' is in the training split too ({train_split}:1); kept in both" \
      in caplog.text
  batches = list(data.eval)
  assert [tuple(images.shape) for images, _ in batches] == [(1, 20, 24, 3), (1, 17, 9, 3), (1, 12, 30, 3)]
  for (images, labels), mask in zip(batches, masks):
    np.testing.assert_array_equal(labels.numpy()[0], mask)
    assert np.array_equal(labels_from_colors(images.numpy()[0]), mask)


def test_an_evaluation_image_larger_than_eval_max_pixels_is_refused_before_training(tmp_path):
  # Evaluated whole, an 8000x8000 image needs about 19 GB: refused up front, the file named.
  sizes = [(20, 24), (40, 30)]
  images_dir, masks_dir, _ = write_folder(tmp_path, sizes)
  train_split, eval_split = write_split_files(tmp_path, ["img000"], ["img000", "img001"])
  cfg = make_cfg(source="folder", images_dir=images_dir, masks_dir=masks_dir, train_split=train_split,
                 eval_split=eval_split, duplicates="warn", eval_max_pixels=1000)
  with pytest.raises(DataError) as error:
    make_datasets(cfg, batch_size=4, seed=0)
  assert str(error.value).startswith(f"{images_dir}/img001.png: 40x30 is 1,200 pixels, more than "
                                     "data.eval_max_pixels=1,000")
  assert str(error.value).endswith("or raise data.eval_max_pixels, or set eval.window to evaluate it in tiles")
  # Evaluated in windows (eval.window), an image of any size is taken.
  assert make_datasets(cfg, batch_size=4, seed=0, tiled=True).num_eval_images == 2
  cfg.eval_max_pixels = 1200  # the training image (480 pixels) never counts, nor one at the bound
  assert make_datasets(cfg, batch_size=4, seed=0).num_eval_images == 2


def test_a_tfrecord_eval_image_over_eval_max_pixels_is_refused_from_its_header(tmp_path, monkeypatch):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(20, 24), (40, 30)])
  pairs = seg_sources.list_folder_pairs(images_dir, masks_dir)
  convert_to_tfrecord.convert(pairs[:1], 5, 255, str(tmp_path / "train"), num_shards=1)
  convert_to_tfrecord.convert(pairs, 5, 255, str(tmp_path / "eval"), num_shards=1)
  cfg = make_cfg(source="tfrecord", train_pattern=str(tmp_path / "train-*"),
                 eval_pattern=str(tmp_path / "eval-*"), eval_max_pixels=1000)
  # Refused before the up-front check decodes any record (of either split).
  with mock.patch.object(tfrecords, "check_tfrecords", side_effect=AssertionError("a record was decoded")):
    with pytest.raises(DataError) as error:
      make_datasets(cfg, batch_size=4, seed=0)
  assert str(error.value).startswith(f"{tmp_path}/eval-00000-of-00001.tfrecord: record 1: 40x30 is 1,200 "
                                     "pixels, more than data.eval_max_pixels=1,000")
  assert make_datasets(cfg, batch_size=4, seed=0, tiled=True).num_eval_images == 2
  cfg.eval_max_pixels = 1200
  assert make_datasets(cfg, batch_size=4, seed=0).num_eval_images == 2
  # An image over PIL's own bound (twice Image.MAX_IMAGE_PIXELS) is named from its header too.
  monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)
  with pytest.raises(DataError, match=r"eval-00000-of-00001.tfrecord: record 1: Image size \(1200 pixels\) "
                                      "exceeds limit of 1000 pixels"):
    make_datasets(cfg, batch_size=4, seed=0)


def test_folder_without_split_files_holds_out_a_stable_eval_set(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 10)] * 8)
  pairs = seg_sources.list_folder_pairs(images_dir, masks_dir)
  train, evaluation = sources.split_by_hash(pairs, 0.25, path_fn=lambda pair: pair[0])
  assert len(evaluation) == 2 and sorted(train + evaluation) == pairs
  reversed_split = sources.split_by_hash(pairs[::-1], 0.25, path_fn=lambda pair: pair[0])
  assert reversed_split[1] == evaluation[::-1]  # depends on names only


def test_small_images_are_padded_to_the_patch_size_with_the_ignore_label():
  image = tf.ones([5, 30, 3], tf.uint8)
  mask = tf.ones([5, 30], tf.uint8)
  patches, labels = pipeline.sample_patches(image, mask, 8, 3, tf.constant([1, 2], tf.int64), 255)
  assert patches.shape == (3, 8, 8, 3) and labels.shape == (3, 8, 8)
  assert np.all(labels.numpy()[:, 5:] == 255) and np.all(labels.numpy()[:, :5] == 1)
  assert np.all(patches.numpy()[:, 5:] == 0)


def test_voc_layout_reads_palette_masks_as_class_ids(tmp_path):
  masks = helpers.write_voc(tmp_path)
  cfg = make_cfg(source="voc", voc_root=str(tmp_path), num_classes=21, patch_size=8)
  data = make_datasets(cfg, batch_size=8, seed=0)
  assert data.class_names == seg_data.VOC_CLASS_NAMES
  (labels,) = eval_labels(data)
  np.testing.assert_array_equal(labels, masks[-1])
  _, train_labels = first_batch(data.train)
  assert set(np.unique(train_labels)) <= set(range(21)) | {255}


def test_voc_class_names_come_from_the_roots_class_names_txt_or_the_config(tmp_path):
  helpers.write_voc(tmp_path)
  names = [f"kind_{c}" for c in range(21)]
  (tmp_path / "class_names.txt").write_text("\n".join(names) + "\n")
  cfg = make_cfg(source="voc", voc_root=str(tmp_path), num_classes=21, patch_size=8)
  assert make_datasets(cfg, batch_size=8, seed=0).class_names == tuple(names)
  cfg.class_names = tuple(f"given_{c}" for c in range(21))  # the config wins over the file
  assert make_datasets(cfg, batch_size=8, seed=0).class_names == cfg.class_names
  cfg.class_names = ()
  (tmp_path / "class_names.txt").write_text("\n".join(names[:11]) + "\n")
  with pytest.raises(DataError, match=r"class_names.txt: 11 class names for data.num_classes=21"):
    make_datasets(cfg, batch_size=8, seed=0)


def test_colorize_uses_voc_colors_so_summaries_match_voc_masks():
  palette = visualize.voc_palette()
  assert len(palette) == 768
  # VOC's published colors: background, aeroplane, bicycle, person, and the 255 of object borders.
  expected = {0: (0, 0, 0), 1: (128, 0, 0), 2: (0, 128, 0), 15: (192, 128, 128), 255: (224, 224, 192)}
  for class_id, rgb in expected.items():
    assert tuple(palette[3 * class_id:3 * class_id + 3]) == rgb
  class_ids = np.arange(256).reshape(2, 8, 16)
  colors = visualize.colorize(class_ids)
  assert colors.shape == (2, 8, 16, 3) and colors.dtype == np.uint8
  np.testing.assert_array_equal(colors.reshape(-1, 3), np.reshape(palette, (256, 3)))


def test_voc_through_tfrecords_gives_the_same_labels(tmp_path):
  masks = helpers.write_voc(tmp_path / "voc")
  for split in ("train", "val"):
    pairs = seg_sources.list_folder_pairs(*seg_sources.voc_paths(str(tmp_path / "voc"), split))
    paths = convert_to_tfrecord.convert(pairs, 21, 255, str(tmp_path / "records" / split), num_shards=2)
    assert len(paths) == 2
  cfg = make_cfg(source="tfrecord", num_classes=21, train_pattern=str(tmp_path / "records" / "train-*"),
                 eval_pattern=str(tmp_path / "records" / "val-*"))
  data = make_datasets(cfg, batch_size=8, seed=0)
  (labels,) = eval_labels(data)
  np.testing.assert_array_equal(labels, masks[-1])
  images, train_labels = first_batch(data.train)
  assert images.shape == (8, 8, 8, 3) and train_labels.dtype == np.int32


def test_tfrecords_of_a_folder_keep_patches_aligned(tmp_path):
  images_dir, masks_dir, masks = write_folder(tmp_path, [(20, 24)] * 3 + [(16, 16)])
  pairs = seg_sources.list_folder_pairs(images_dir, masks_dir)
  convert_to_tfrecord.convert(pairs, 5, 255, str(tmp_path / "all"), num_shards=3)
  pattern = str(tmp_path / "all-*.tfrecord")
  cfg = make_cfg(source="tfrecord", train_pattern=pattern, eval_pattern=pattern, patch_size=12)
  data = make_datasets(cfg, batch_size=16, seed=0)
  images, labels = first_batch(data.train)
  assert np.array_equal(labels_from_colors(images), labels)
  assert data.num_eval_images == 4
  # Eval reads the shards in order: round-robin put images 0 and 3 in the first.
  for labels, index in zip(eval_labels(data), [0, 3, 1, 2]):
    height, width = masks[index].shape
    np.testing.assert_array_equal(labels[:height, :width], masks[index])


def write_npy(root, count, size=8, dtype=np.uint8, scale=1.0):
  """Patches whose red channel encodes their labels; returns (images path, labels path)."""
  rng = np.random.default_rng(2)
  labels = np.stack([random_mask(rng, size, size) for _ in range(count)])
  images = np.stack([image_of_mask(m, rng) for m in labels]).astype(dtype) * dtype(scale)
  np.save(root / "images.npy", images)
  np.save(root / "labels.npy", labels)
  return str(root / "images.npy"), str(root / "labels.npy")


@pytest.mark.parametrize("dtype, pixel_max", [(np.uint8, 255.0), (np.float32, 1.0)])
def test_npy_patches_stream_with_their_labels(tmp_path, dtype, pixel_max):
  scale = 1.0 if pixel_max == 255 else 1 / 255
  images_path, labels_path = write_npy(tmp_path, 40, dtype=dtype, scale=scale)
  cfg = make_cfg(source="npy", train_images=images_path, train_labels=labels_path, npy_pixel_max=pixel_max)
  data = make_datasets(cfg, batch_size=12, seed=0)
  images, labels = first_batch(data.train)
  assert images.shape == (12, 8, 8, 3) and labels.shape == (12, 8, 8)
  assert np.array_equal(labels_from_colors(images), labels)
  assert data.num_eval_images == 10  # the last quarter is held out
  eval_batches = list(data.eval)
  assert [tuple(labels.shape) for _, labels in eval_batches] == [(10, 8, 8)]
  np.testing.assert_array_equal(eval_batches[0][1].numpy(), np.load(labels_path)[30:])


def test_npy_names_the_first_patch_with_nan(tmp_path):
  images = np.ones((20, 8, 8, 3), np.float32)
  images[13, 2, 2, 1] = np.nan
  np.save(tmp_path / "patches.npy", images)
  np.save(tmp_path / "labels.npy", np.zeros((20, 8, 8), np.uint8))
  cfg = make_cfg(source="npy", train_images=str(tmp_path / "patches.npy"),
                 train_labels=str(tmp_path / "labels.npy"))
  with pytest.raises(DataError, match="patches.npy: index 13 contains NaN"):
    make_datasets(cfg, batch_size=4, seed=0)


def test_npy_rejects_pixels_outside_the_configured_range(tmp_path):
  images_path, labels_path = write_npy(tmp_path, 4, dtype=np.float32)
  cfg = make_cfg(source="npy", train_images=images_path, train_labels=labels_path, npy_pixel_max=1.0)
  with pytest.raises(DataError, match="images.npy: values span .* outside \\[0, data.npy_pixel_max=1\\]"):
    make_datasets(cfg, batch_size=4, seed=0)


def test_npy_rejects_labels_out_of_range_and_mismatched_shapes(tmp_path):
  images_path, labels_path = write_npy(tmp_path, 10)
  labels = np.load(labels_path)
  labels[6, 3, 3] = 9
  np.save(labels_path, labels)
  cfg = make_cfg(source="npy", train_images=images_path, train_labels=labels_path)
  with pytest.raises(DataError, match="labels.npy: index 6 has label 9"):
    make_datasets(cfg, batch_size=4, seed=0)
  np.save(labels_path, labels[:9])
  with pytest.raises(DataError, match="labels.npy: labels are \\[9, 8, 8\\], images .* are \\[10, 8, 8, 3\\]"):
    make_datasets(cfg, batch_size=4, seed=0)


def test_a_100mb_npy_dataset_stays_out_of_the_graph(tmp_path):
  count = 100_000_000 // (28 * 28 * 3)
  images = np.lib.format.open_memmap(tmp_path / "images.npy", mode="w+", dtype=np.uint8,
                                     shape=(count, 28, 28, 3))
  images[:] = 7
  images.flush()
  del images
  np.save(tmp_path / "labels.npy", np.ones((count, 28, 28), np.uint8))
  assert os.path.getsize(tmp_path / "images.npy") > 99_000_000
  cfg = make_cfg(source="npy", train_images=str(tmp_path / "images.npy"),
                 train_labels=str(tmp_path / "labels.npy"), patch_size=28)
  data = make_datasets(cfg, batch_size=32, seed=0)
  for dataset in (data.train, data.eval):
    assert len(dataset._as_serialized_graph().numpy()) < 1 << 20  # pylint: disable=protected-access
  images, labels = first_batch(data.train)
  assert images.shape == (32, 28, 28, 3) and np.all(labels == 1)


@pytest.mark.parametrize("source", ["synthetic", "npy"])
def test_train_iterator_resumes_at_the_next_batch(tmp_path, source):
  if source == "npy":
    images_path, labels_path = write_npy(tmp_path, 50)
    cfg = make_cfg(source="npy", train_images=images_path, train_labels=labels_path)
  else:
    cfg = make_cfg()
  iterator = iter(make_datasets(cfg, 8, seed=0, workdir=str(tmp_path)).train)
  for _ in range(3):
    next(iterator)
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  path = checkpoint.save(str(tmp_path / "ckpt" / "it"))
  expected = [next(iterator) for _ in range(2)]

  fresh = iter(make_datasets(cfg, 8, seed=0, workdir=str(tmp_path)).train)
  tf.train.Checkpoint(iterator=fresh).restore(path).assert_consumed()
  for (images, labels), (want_images, want_labels) in zip([next(fresh) for _ in range(2)], expected):
    np.testing.assert_array_equal(images.numpy(), want_images.numpy())
    np.testing.assert_array_equal(labels.numpy(), want_labels.numpy())


def folder_cfg(images_dir, masks_dir, **overrides):
  return make_cfg(source="folder", images_dir=images_dir, masks_dir=masks_dir, **overrides)


def test_a_corrupt_image_is_named(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 10)] * 4)
  (tmp_path / "images" / "img002.png").write_bytes(b"\x89PNG\r\n\x1a\ngarbage")
  with pytest.raises(DataError, match=f"^{images_dir}/img002.png: does not decode as an image"):
    make_datasets(folder_cfg(images_dir, masks_dir), 4, seed=0)


def test_skip_bad_files_skips_and_counts_corrupt_images(tmp_path, caplog):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 10)] * 6)
  (tmp_path / "images" / "img001.png").write_bytes(b"")
  (tmp_path / "masks" / "img004.png").write_bytes(b"not a png")
  train_split, eval_split = write_split_files(tmp_path, [f"img{i:03d}" for i in range(5)], ["img005"])
  cfg = folder_cfg(images_dir, masks_dir, train_split=train_split, eval_split=eval_split,
                   skip_bad_files=True)
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 4, seed=0)
  assert "skipped 2 of 5 files that do not decode: img001.png, img004.png" in caplog.text
  first_batch(data.train)
  pairs, _ = class_masks.check_pairs(seg_sources.list_folder_pairs(images_dir, masks_dir, train_split), 5, 255,
                                     skip_bad_files=True)
  assert [os.path.basename(p[0]) for p in pairs] == ["img000.png", "img002.png", "img003.png"]


def test_a_mask_of_another_size_is_named(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 12)] * 3)
  Image.fromarray(np.zeros((10, 11), np.uint8)).save(tmp_path / "masks" / "img001.png")
  with pytest.raises(DataError, match=f"^mask {masks_dir}/img001.png is 10x11, image {images_dir}/img001.png "
                                      "is 10x12$"):
    make_datasets(folder_cfg(images_dir, masks_dir), 4, seed=0)


def test_a_class_id_beyond_num_classes_is_named(tmp_path):
  images_dir, masks_dir, masks = write_folder(tmp_path, [(10, 12)] * 3)
  masks[2][4, 4] = 7
  Image.fromarray(masks[2]).save(tmp_path / "masks" / "img002.png")
  with pytest.raises(DataError, match=f"^{masks_dir}/img002.png: class id 7 >= data.num_classes=5 and not "
                                      "data.ignore_label=255$"):
    make_datasets(folder_cfg(images_dir, masks_dir), 4, seed=0)


def test_an_empty_folder_is_named(tmp_path):
  (tmp_path / "images").mkdir()
  (tmp_path / "masks").mkdir()
  with pytest.raises(DataError, match=f"^{tmp_path}/images: no files ending in"):
    make_datasets(folder_cfg(str(tmp_path / "images"), str(tmp_path / "masks")), 4, seed=0)


def test_a_missing_split_file_is_named(tmp_path):
  helpers.write_voc(tmp_path)
  os.remove(tmp_path / "ImageSets/Segmentation/val.txt")
  cfg = make_cfg(source="voc", voc_root=str(tmp_path), num_classes=21)
  with pytest.raises(DataError, match=f"^{tmp_path}/ImageSets/Segmentation/val.txt: no such split file$"):
    make_datasets(cfg, 4, seed=0)


def test_an_image_without_a_mask_is_named(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 12)] * 3)
  os.remove(tmp_path / "masks" / "img001.png")
  with pytest.raises(DataError, match=f"^image {images_dir}/img001.png has no mask {masks_dir}/img001.png$"):
    make_datasets(folder_cfg(images_dir, masks_dir), 4, seed=0)


def test_masks_must_be_png_class_ids(tmp_path):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 12)] * 3)
  Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(tmp_path / "masks" / "img000.png")
  with pytest.raises(DataError, match="img000.png: masks must be 8-bit grayscale or palette PNGs"):
    make_datasets(folder_cfg(images_dir, masks_dir), 4, seed=0)


@pytest.mark.parametrize("overrides, message", [
    (dict(source="pictures"), "data.source 'pictures' is unknown"),
    (dict(ignore_label=3), "data.ignore_label must be in \\[num_classes, 255\\]"),
    (dict(source="folder"), "data.images_dir must be set"),
    (dict(num_classes=6), "data.num_classes must be 2..5 for synthetic scenes"),
])
def test_bad_config_values_are_named(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message):
    make_datasets(make_cfg(**overrides), 4, seed=0, workdir=str(tmp_path))


def test_the_settings_groups_hold_every_key_of_the_data_section_once():
  cfg = make_cfg()
  settings = seg_data.read_settings(cfg)
  assert sorted(helpers.settings_keys(settings, cfg)) == sorted(cfg.keys())
  assert settings.train.augment == augment_lib.Augmentation()  # the data.augment section, all off
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.source.num_classes = 3


def test_convert_script_writes_shards_from_the_command_line(tmp_path):
  masks = helpers.write_voc(tmp_path / "voc")
  script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "convert_to_tfrecord.py")
  result = subprocess.run(
      [sys.executable, script, f"--voc_root={tmp_path / 'voc'}", "--split=val", "--num_classes=21",
       f"--output_prefix={tmp_path / 'val'}", "--num_shards=1"], capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr
  assert f"wrote 1 shards: {tmp_path / 'val'}-*-of-00001.tfrecord" in result.stdout
  (record,) = tf.data.TFRecordDataset(str(tmp_path / "val-00000-of-00001.tfrecord"))
  features = tf.io.parse_single_example(record, class_masks.TFRECORD_FEATURES)
  np.testing.assert_array_equal(
      tf.io.decode_png(features["image/segmentation/class/encoded"])[..., 0].numpy(), masks[-1])


# Files that PIL reads but TensorFlow does not, and the split files.


def truncate(path, num_bytes=16):
  """Cuts the last bytes of a PNG: PIL still reads it, TensorFlow's decoder does not."""
  path.write_bytes(path.read_bytes()[:-num_bytes])
  with Image.open(path) as img:
    img.load()
  return str(path)


def num_eval_images(data):
  return sum(len(labels) for _, labels in data.eval)


def one_line(excinfo):
  message = str(excinfo.value)
  assert "\n" not in message
  return message


@pytest.mark.parametrize("folder", ["images", "masks"])
@pytest.mark.parametrize("split, bad_id", [("train", "img001"), ("eval", "img005")])
def test_a_truncated_png_is_refused_up_front_or_skipped_and_counted(tmp_path, caplog, folder, split, bad_id):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 12)] * 6)
  bad = truncate(tmp_path / folder / f"{bad_id}.png")
  train_split, eval_split = write_split_files(tmp_path, [f"img{i:03d}" for i in range(4)],
                                              ["img004", "img005"])
  cfg = folder_cfg(images_dir, masks_dir, train_split=train_split, eval_split=eval_split)
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    make_datasets(cfg, 4, seed=0)
  assert one_line(excinfo).startswith(f"{bad}: does not decode as an image (TensorFlow: ")
  cfg.skip_bad_files = True
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 4, seed=0)
  assert f"skipping: {bad}: does not decode" in caplog.text
  counts = {"train": 0, "eval": 0}
  counts[split] = 1
  assert data.data_report == {"skipped_files": counts, "skipped_names": [f"{bad_id}.png"]}
  assert data.num_eval_images == 2 - counts["eval"]
  assert num_eval_images(data) == data.num_eval_images  # the pipelines run past the bad file
  first_batch(data.train)


def write_records(tmp_path, count, cut=None):
  """Segmentation TFRecords of `count` 10x12 images (record `cut`'s image truncated); returns the pattern."""
  rng = np.random.default_rng(0)
  records = []
  for i in range(count):
    mask = random_mask(rng, 10, 12)
    image = tf.io.encode_png(image_of_mask(mask, rng)).numpy()
    records.append(tfrecords.make_example({
        "image/encoded": tfrecords.bytes_feature(image[:-16] if i == cut else image),
        "image/segmentation/class/encoded":
            tfrecords.bytes_feature(tf.io.encode_png(mask[..., None]).numpy()),
    }))
  tfrecords.write_tfrecord_shards(records, str(tmp_path / "train"), 2, log_every=0)
  return str(tmp_path / "train-*.tfrecord")


@pytest.mark.parametrize("split", ["train", "eval"])
def test_tfrecords_are_decoded_up_front_naming_shard_and_record(tmp_path, caplog, split):
  good = write_records(tmp_path / "good", 4)
  bad = write_records(tmp_path / "bad", 5, cut=3)
  cfg = make_cfg(source="tfrecord", train_pattern=bad if split == "train" else good,
                 eval_pattern=bad if split == "eval" else good, patch_size=8)
  shard = str(tmp_path / "bad" / "train-00001-of-00002.tfrecord")
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    make_datasets(cfg, 4, seed=0)
  assert one_line(excinfo).startswith(f"{shard}: record 1: image/encoded: does not decode as an image")
  cfg.skip_bad_files = True
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 4, seed=0)
  assert f"skipped 1 of 5 records that do not decode: {shard} record 1" in caplog.text
  counts = {"train": 0, "eval": 0}
  counts[split] = 1
  assert data.data_report == {"skipped_files": counts, "skipped_names": [f"{shard} record 1"]}
  assert num_eval_images(data) == data.num_eval_images == 4
  for _ in data.train.take(3):
    pass


def test_a_tfrecord_whose_mask_does_not_fit_its_image_is_named(tmp_path):
  image = tf.io.encode_png(np.zeros((10, 12, 3), np.uint8)).numpy()
  mask = tf.io.encode_png(np.zeros((10, 11, 1), np.uint8)).numpy()
  tfrecords.write_tfrecord_shards([tfrecords.make_example({
      "image/encoded": tfrecords.bytes_feature(image),
      "image/segmentation/class/encoded": tfrecords.bytes_feature(mask)})], str(tmp_path / "x"), 1)
  pattern = str(tmp_path / "x-*.tfrecord")
  cfg = make_cfg(source="tfrecord", train_pattern=pattern, eval_pattern=pattern)
  with pytest.raises(DataError, match=r"x-00000-of-00001.tfrecord: record 0: the mask is 10x11, the image "
                                      r"10x12$"):
    make_datasets(cfg, 4, seed=0)


def split_cfg(tmp_path, train_text, eval_text=b"img003\n", **overrides):
  images_dir, masks_dir, _ = write_folder(tmp_path, [(10, 12)] * 4)
  (tmp_path / "train.txt").write_bytes(train_text)
  (tmp_path / "eval.txt").write_bytes(eval_text)
  return folder_cfg(images_dir, masks_dir, train_split=str(tmp_path / "train.txt"),
                    eval_split=str(tmp_path / "eval.txt"), **overrides)


def test_split_files_may_start_with_a_bom_and_end_lines_with_crlf(tmp_path):
  cfg = split_cfg(tmp_path, "\ufeffimg000\r\nimg001 extra words\r\n".encode("utf-8"))
  assert make_datasets(cfg, 4, seed=0).num_eval_images == 1
  assert seg_sources.read_split_file(cfg.train_split) == {"img000": 1, "img001": 2}


@pytest.mark.parametrize("train_text, expected", [
    (b"img000\nimg\xe9\n", r"train.txt: not UTF-8 text \(byte 0xe9 at line 2\); save it as UTF-8$"),
    (b"img000\nimg001\n\nimg000\n", r"train.txt:4: image id 'img000' is listed again \(first at line 1\); "
                                    "remove one, or set data.duplicates='warn' to keep the first$"),
    (b"img000\nimg009\n", r"train.txt:2: image id 'img009' has no image in .*/images$"),
    (b"img000\nimg003\n", r"eval.txt:1: image id 'img003' is in the training split too \(.*train.txt:2\); "
                          "remove it from one split, or set data.duplicates='warn' to keep both$"),
    (b"\n\n", "train.txt: split file lists no image ids$"),
])
def test_bad_split_files_are_one_line_naming_file_and_line(tmp_path, train_text, expected):
  with pytest.raises(DataError) as excinfo:
    make_datasets(split_cfg(tmp_path, train_text), 4, seed=0)
  assert re.search(f"^{tmp_path}/{expected}", one_line(excinfo))


def test_a_folder_or_nothing_where_a_split_file_should_be_is_named(tmp_path):
  cfg = split_cfg(tmp_path, b"img000\n")
  cfg.train_split = str(tmp_path / "images")
  with pytest.raises(DataError, match=f"^{tmp_path}/images: a folder, expected a split file$"):
    make_datasets(cfg, 4, seed=0)
  cfg.train_split = str(tmp_path / "missing.txt")
  with pytest.raises(DataError, match=f"^{tmp_path}/missing.txt: no such split file$"):
    make_datasets(cfg, 4, seed=0)


def test_duplicates_warn_keeps_the_first_with_a_warning(tmp_path, caplog):
  cfg = split_cfg(tmp_path, b"img000\nimg001\nimg000\n", duplicates="warn")
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 4, seed=0)
  assert f"{cfg.train_split}:3: image id 'img000' is listed again (first at line 1); keeping the first" \
      in caplog.text
  assert [os.path.basename(image) for image, _ in data.train_files] == ["img000.png", "img001.png"]
  cfg.duplicates = "maybe"
  with pytest.raises(ConfigError, match="data.duplicates='maybe' is not one of error, warn"):
    make_datasets(cfg, 4, seed=0)


def eval_batches(data):
  return [(images.numpy(), labels.numpy()) for images, labels in data.eval]


def test_an_evaluation_reads_the_evaluation_files_only(tmp_path):
  """for_training=False gives the same evaluation pipeline with the training files gone (or, where the
  evaluation set is a hash split of one folder, with a training image corrupt: listed, never decoded)."""
  folder = tmp_path / "folder"
  images_dir, masks_dir, _ = write_folder(folder, [(12, 16)] * 5)
  train_split, eval_split = write_split_files(folder, ["img000", "img001", "img002"], ["img003", "img004"])
  helpers.write_voc(tmp_path / "voc")
  records = tmp_path / "records"
  records.mkdir()
  eval_pattern = write_records(records, 3)
  npy = {split: tmp_path / split for split in ("train", "eval")}
  for root in npy.values():
    root.mkdir()
  (train_images, train_labels), (eval_images, eval_labels) = (write_npy(npy[s], 6) for s in ("train", "eval"))
  cases = {  # name: (config, the training files an evaluation does without)
      "folder with split files": (dict(source="folder", images_dir=images_dir, masks_dir=masks_dir,
                                       train_split=train_split, eval_split=eval_split),
                                  [train_split] + [f"{d}/img00{i}.png" for d in (images_dir, masks_dir)
                                                   for i in range(3)]),
      "voc": (dict(source="voc", voc_root=str(tmp_path / "voc"), num_classes=21),
              [str(tmp_path / "voc/ImageSets/Segmentation/train.txt")] +
              [str(tmp_path / f"voc/JPEGImages/2007_00000{i}.jpg") for i in range(3)]),
      # Trained on the same shards; the evaluation is given a training pattern that matches nothing.
      "tfrecord": (dict(source="tfrecord", train_pattern=eval_pattern, eval_pattern=eval_pattern), []),
      "npy with evaluation arrays": (dict(source="npy", train_images=train_images, train_labels=train_labels,
                                          eval_images=eval_images, eval_labels=eval_labels),
                                     [train_images, train_labels]),
  }
  built = {name: eval_batches(make_datasets(make_cfg(**cfg), 4, 0, 4)) for name, (cfg, _) in cases.items()}
  cases["tfrecord"][0]["train_pattern"] = str(tmp_path / "nowhere-*")
  for name, (cfg, train_files) in cases.items():
    for path in train_files:
      os.remove(path)
    data = make_datasets(make_cfg(**cfg), 4, 0, 4, for_training=False)
    assert data.train is None and data.num_train_images == 0, name
    batches = eval_batches(data)
    assert sum(len(images) for images, _ in batches) == data.num_eval_images >= 1, name
    for (images, labels), (want_images, want_labels) in zip(batches, built[name], strict=True):
      np.testing.assert_array_equal(images, want_images, err_msg=name)
      np.testing.assert_array_equal(labels, want_labels, err_msg=name)

  # One folder split by hash: the training images are listed (the split needs them), not checked.
  hashed = tmp_path / "hashed"
  images_dir, masks_dir, _ = write_folder(hashed, [(12, 16)] * 8)
  cfg = make_cfg(source="folder", images_dir=images_dir, masks_dir=masks_dir, eval_fraction=0.25)
  data = make_datasets(cfg, 4, 0, 4)
  want = eval_batches(data)
  eval_names = {os.path.basename(p) for p, _ in sources.split_by_hash(
      seg_sources.list_folder_pairs(images_dir, masks_dir), 0.25, path_fn=lambda pair: pair[0])[1]}
  train_image = next(p for p in sorted(os.listdir(images_dir)) if p not in eval_names)
  truncate(hashed / "images" / train_image)
  with pytest.raises(DataError, match=train_image):
    make_datasets(cfg, 4, 0, 4)
  got = eval_batches(make_datasets(cfg, 4, 0, 4, for_training=False))
  assert len(got) == len(want) >= 1
  for (images, labels), (want_images, want_labels) in zip(got, want):
    np.testing.assert_array_equal(images, want_images)
    np.testing.assert_array_equal(labels, want_labels)
