"""Identity sources, the P x K sampler and bad input."""
import dataclasses
import logging
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from configs import triplet as triplet_config
import helpers
from triplet import data
from triplet import input_pipeline
from triplet import lfw_pairs
from triplet import sources
from triplet import synthetic as synthetic_lib


def write_png(path, red, green, size=8):
  """A uniform image whose red and green values say which identity and image it is."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pixels = np.zeros((size, size, 3), np.uint8)
  pixels[..., 0], pixels[..., 1] = red, green
  Image.fromarray(pixels).save(path)


def make_folder(root, counts, prefix="id"):
  """Identity i (folder idNN) with counts[i] images; red = i, green = image number."""
  for i, count in enumerate(counts):
    for j in range(count):
      write_png(os.path.join(root, f"{prefix}{i:02d}", f"{prefix}{i:02d}_{j + 1:04d}.png"), i, j)
  return str(root)


def decode_ids(images):
  """Uniform crops in unit range -> (identity, image number) per image."""
  values = np.rint(images.numpy()[:, 0, 0, :2] * 255).astype(int)
  return values[:, 0], values[:, 1]


def train_batches(identities, p, k, seed=0, take=None):
  dataset = input_pipeline.make_train_dataset(identities, p, k, load_size=8, crop_size=6,
                                    normalization_name="unit", seed=seed)
  return list(dataset.take(take or -(-len(identities) // p)))


def error_message(excinfo):
  message = str(excinfo.value)
  assert "\n" not in message
  return message


def test_every_batch_holds_p_identities_of_k_distinct_images(tmp_path):
  counts = [5, 3, 4, 6, 3, 3, 7]
  identities = sources.select_identities(sources.list_identities(make_folder(tmp_path, counts)), 3)
  p, k = 3, 3
  seen = set()
  for images, labels in train_batches(identities, p, k):
    assert images.shape == (p * k, 6, 6, 3) and images.dtype == tf.float32
    labels = labels.numpy()
    blocks = labels.reshape(p, k)
    assert np.all(blocks == blocks[:, :1])  # K consecutive images per identity
    assert len(set(blocks[:, 0])) == p  # P distinct identities
    identity, image = decode_ids(images)
    np.testing.assert_array_equal(identity, labels)  # Labels index the sorted folders.
    for block in image.reshape(p, k):
      assert len(set(block)) == k  # No image twice when an identity has K or more.
    seen.update(labels)
  assert seen == set(range(len(counts)))  # ceil(7 / 3) = 3 batches cover every identity.


def test_sampler_is_deterministic_and_resumes_from_a_checkpoint(tmp_path):
  identities = sources.list_identities(make_folder(tmp_path / "ids", [4] * 6))
  dataset = input_pipeline.make_train_dataset(identities, 2, 2, 8, 6, "unit", seed=3)
  first = [labels.numpy() for _, labels in dataset.take(6)]
  again = [labels.numpy() for _, labels in dataset.take(6)]
  np.testing.assert_array_equal(first, again)
  other_seed = [labels.numpy() for _, labels in
                input_pipeline.make_train_dataset(identities, 2, 2, 8, 6, "unit", seed=4).take(6)]
  assert not np.array_equal(first, other_seed)
  iterator = iter(dataset)
  next(iterator), next(iterator)
  path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt" / "it"))
  expected = [next(iterator)[0].numpy() for _ in range(3)]
  resumed = iter(dataset)
  tf.train.Checkpoint(iterator=resumed).restore(path)
  for want in expected:
    np.testing.assert_array_equal(next(resumed)[0].numpy(), want)


def test_one_image_identity_is_an_error_unless_dropped_or_repeated(tmp_path, caplog):
  root = make_folder(tmp_path, [3, 1, 4])
  identities = sources.list_identities(root)
  with pytest.raises(DataError) as excinfo:
    sources.select_identities(identities, 2)
  assert os.path.join(root, "id01") in error_message(excinfo)
  with caplog.at_level(logging.WARNING):
    kept = sources.select_identities(identities, 2, "drop")
  assert [i.name for i in kept] == ["id00", "id02"]
  assert "dropped 1 of 3 identities" in caplog.text
  repeated = sources.select_identities(identities, 2, "repeat")
  assert len(repeated) == 3
  for images, labels in train_batches(repeated, 3, 2):
    identity, image = decode_ids(images)
    assert list(image[identity == 1]) == [0, 0]  # Its one image, twice.


def test_non_image_file_is_an_error_or_a_counted_skip(tmp_path, caplog):
  root = make_folder(tmp_path, [2, 2])
  notes = os.path.join(root, "id01", "notes.txt")
  with open(notes, "w") as f:
    f.write("not an image")
  with open(os.path.join(root, "id01", ".DS_Store"), "w") as f:
    f.write("ignored")
  with pytest.raises(DataError) as excinfo:
    sources.list_identities(root)
  assert notes in error_message(excinfo)
  with caplog.at_level(logging.WARNING):
    identities = sources.list_identities(root, skip_bad_files=True)
  assert [len(i.paths) for i in identities] == [2, 2]
  assert "skipped 1 files that are not images" in caplog.text


def test_corrupt_image_is_an_error_or_a_counted_skip(tmp_path, caplog):
  root = make_folder(tmp_path, [2, 3])
  corrupt = os.path.join(root, "id01", "id01_0009.png")
  with open(corrupt, "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n truncated")
  with pytest.raises(DataError) as excinfo:
    sources.list_identities(root)
  assert corrupt in error_message(excinfo)
  with caplog.at_level(logging.WARNING):
    identities = sources.list_identities(root, skip_bad_files=True)
  assert [len(i.paths) for i in identities] == [2, 3]
  assert "skipped 1 of 6 files" in caplog.text


def test_too_few_identities_for_a_batch(tmp_path):
  identities = sources.list_identities(make_folder(tmp_path, [2, 2]))
  with pytest.raises(DataError) as excinfo:
    input_pipeline.make_train_dataset(identities, 3, 2, 8, 6, "unit", seed=0)
  assert error_message(excinfo) == (f"{tmp_path}: 2 usable identities, but a batch takes "
                                    "data.identities_per_batch=3 distinct ones; lower it or add identities")


def write_pairs(path, lines):
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return str(path)


def test_read_pairs_parses_both_line_kinds(tmp_path):
  root = make_folder(tmp_path / "images", [2, 2])
  pairs_path = write_pairs(tmp_path / "pairs.txt", ["2\t1", "id00\t1\t2", "id00\t1\tid01\t2",
                                                    "id01 1 2", "id01 2 id00 1"])
  pairs, num_folds = lfw_pairs.read_pairs(pairs_path, root)
  assert num_folds == 2
  assert [p.is_same for p in pairs] == [True, False, True, False]
  assert pairs[1].path_a == os.path.join(root, "id00", "id00_0001.png")
  assert pairs[1].path_b == os.path.join(root, "id01", "id01_0002.png")
  # A single-number header is one fold (LFW's pairsDevTrain.txt).
  one_fold = write_pairs(tmp_path / "dev.txt", ["1", "id00 1 2", "id00 1 id01 1"])
  assert lfw_pairs.read_pairs(one_fold, root)[1] == 1


@pytest.mark.parametrize("lines, expected", [
    (["1\t1", "id00\t1\t7", "id00\t1\tid01\t1"], "id00_0007.* which does not exist"),
    (["1\t1", "id00\t1\t2", "id00\t1\tnobody\t1"], "nobody_0001.* which does not exist"),
    (["1\t1", "id00\t1", "id00\t1\tid01\t1"], "expected 'name idx1 idx2'"),
    (["2\t1", "id00\t1\t2", "id00\t1\tid01\t1"], "header promises 2 folds of 2 pairs"),
    (["ten folds", "id00\t1\t2"], "expected a header"),
])
def test_bad_pairs_file_is_one_line_naming_the_file(tmp_path, lines, expected):
  root = make_folder(tmp_path / "images", [2, 2])
  pairs_path = write_pairs(tmp_path / "pairs.txt", lines)
  with pytest.raises(DataError) as excinfo:
    lfw_pairs.read_pairs(pairs_path, root)
  message = error_message(excinfo)
  assert message.startswith(pairs_path) and expected in message


def test_check_pairs_drops_pairs_with_corrupt_images_when_skipping(tmp_path):
  root = make_folder(tmp_path / "images", [2, 2])
  with open(os.path.join(root, "id01", "id01_0002.png"), "wb") as f:
    f.write(b"garbage")
  pairs, _ = lfw_pairs.read_pairs(
      write_pairs(tmp_path / "pairs.txt", ["1\t1", "id00\t1\t2", "id00\t1\tid01\t2"]), root)
  with pytest.raises(DataError, match="id01_0002.png"):
    lfw_pairs.check_pairs(pairs)
  assert lfw_pairs.check_pairs(pairs, skip_bad_files=True) == (pairs[:1],
                                                          [os.path.join(root, "id01", "id01_0002.png")])


def test_synthetic_identities_are_written_once_with_disjoint_eval_identities(tmp_path):
  kwargs = dict(num_train=6, num_eval=4, images_per_identity=3, image_size=12, seed=5,
                num_folds=2, pairs_per_fold=3)
  synthetic = synthetic_lib.make_synthetic_identities(str(tmp_path), **kwargs)
  train = sources.list_identities(synthetic.train_dir)
  evaluation = sources.list_identities(synthetic.eval_dir)
  assert [len(i.paths) for i in train] == [3] * 6 and [len(i.paths) for i in evaluation] == [3] * 4
  pairs, num_folds = lfw_pairs.read_pairs(synthetic.pairs_path, synthetic.eval_dir)
  assert num_folds == 2 and sum(p.is_same for p in pairs) == 6 and len(pairs) == 12
  stamp = os.path.getmtime(train[0].paths[0])
  again = synthetic_lib.make_synthetic_identities(str(tmp_path), **kwargs)
  assert again == synthetic and os.path.getmtime(train[0].paths[0]) == stamp
  # Same seed, same pixels, elsewhere.
  copy = synthetic_lib.make_synthetic_identities(str(tmp_path / "copy"), **kwargs)
  first = sources.list_identities(copy.train_dir)[0].paths[0]
  np.testing.assert_array_equal(np.asarray(Image.open(first)), np.asarray(Image.open(train[0].paths[0])))


def test_glyphs_of_all_identities_differ_in_at_least_three_cells():
  glyphs = synthetic_lib._make_glyphs(40, 4, np.random.default_rng(0))
  distances = [np.sum(a != b) for i, a in enumerate(glyphs) for b in glyphs[i + 1:]]
  assert min(distances) >= 3


def test_eval_preprocessing_crops_the_center(tmp_path):
  pixels = np.zeros((8, 8, 3), np.uint8)
  pixels[..., 0] = np.arange(8)[None, :] * 10  # Red grows to the right.
  path = str(tmp_path / "gradient.png")
  Image.fromarray(pixels).save(path)
  (images,) = list(input_pipeline.make_eval_dataset([path], load_size=8, crop_size=4,
                                          normalization_name="unit", batch_size=2))
  assert images.shape == (1, 4, 4, 3)
  np.testing.assert_allclose(images.numpy()[0, 0, :, 0] * 255, [20, 30, 40, 50], atol=1e-3)
  # No held-out images (a folder source without eval_dir or pairs_file): an empty dataset.
  assert not list(input_pipeline.make_eval_dataset([], 8, 4, "unit", 2))


# Files that PIL reads but TensorFlow does not, text inputs, overlap, the data report.


def truncate(path, num_bytes=16):
  """Cuts the last bytes of a PNG: PIL still reads it, TensorFlow's decoder does not."""
  with open(path, "rb") as f:
    contents = f.read()[:-num_bytes]
  with open(path, "wb") as f:
    f.write(contents)
  with Image.open(path) as img:
    img.load()
  return path


def folder_config(tmp_path, **overrides):
  cfg = triplet_config.get_config("smoke").data
  cfg.source = "folder"
  cfg.train_dir = make_folder(tmp_path / "train", [3, 3, 3])
  cfg.eval_dir = make_folder(tmp_path / "eval", [2, 2], prefix="other")
  for key, value in overrides.items():
    cfg[key] = value
  return cfg


def load_report(cfg):
  settings = data.read_settings(cfg)
  identities = sources.load_train_identities(settings, 0, None)
  return sources.data_report(identities, sources.load_eval_data(settings, 0, None))


@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_truncated_png_is_refused_up_front_or_skipped_and_counted(tmp_path, caplog, split):
  cfg = folder_config(tmp_path)
  folder = os.path.join(cfg.train_dir, "id01") if split == "train" else os.path.join(cfg.eval_dir, "other01")
  bad = truncate(os.path.join(folder, sorted(os.listdir(folder))[0]))
  with pytest.raises(DataError) as excinfo:
    load_report(cfg)
  assert error_message(excinfo).startswith(f"{bad}: does not decode as an image (TensorFlow: ")
  cfg.skip_bad_files = True
  with caplog.at_level(logging.WARNING):
    report = load_report(cfg)
  assert f"skipping: {bad}: does not decode" in caplog.text
  assert report == {"skipped_files": {"train": int(split == "train"), "eval": int(split == "eval")},
                    "skipped_names": [bad]}


def test_pair_images_and_non_images_skipped_are_in_the_report(tmp_path):
  cfg = folder_config(tmp_path, skip_bad_files=True)
  cfg.pairs_file = write_pairs(tmp_path / "pairs.txt", ["1\t1", "other00\t1\t2", "other00\t1\tother01\t2"])
  bad = truncate(os.path.join(cfg.eval_dir, "other01", "other01_0002.png"))
  notes = os.path.join(cfg.train_dir, "id00", "notes.txt")
  with open(notes, "w") as f:
    f.write("not an image")
  report = load_report(cfg)
  assert report == {"skipped_files": {"train": 1, "eval": 1, "pairs": 1},
                    "skipped_names": [notes, bad, bad]}


def test_an_identity_in_train_and_eval_is_named(tmp_path, caplog):
  cfg = folder_config(tmp_path)
  os.rename(os.path.join(cfg.eval_dir, "other01"), os.path.join(cfg.eval_dir, "id02"))
  with pytest.raises(DataError) as excinfo:
    sources.load_eval_data(data.read_settings(cfg), 0, None)
  assert error_message(excinfo) == (
      f"{cfg.eval_dir}/id02: identity 'id02' is in the training split too ({cfg.train_dir}/id02); "
      "remove it from one split, or set data.duplicates='warn' to keep both")
  cfg.duplicates = "warn"
  with caplog.at_level(logging.WARNING):
    assert len(sources.load_eval_data(data.read_settings(cfg), 0, None).paths) == 4
  assert "kept in both splits" in caplog.text


def test_a_short_identity_names_the_keys_to_change(tmp_path):
  identities = sources.list_identities(make_folder(tmp_path, [3, 1]))
  with pytest.raises(DataError) as excinfo:
    sources.select_identities(identities, 2)
  message = error_message(excinfo)
  assert "data.images_per_identity=2" in message
  assert "set data.small_identities to 'drop' or 'repeat'" in message


def test_pairs_file_may_start_with_a_bom(tmp_path):
  root = make_folder(tmp_path / "images", [2, 2])
  path = tmp_path / "pairs.txt"
  path.write_bytes("\ufeff1\t1\r\nid00\t1\t2\r\nid00\t1\tid01\t2\r\n".encode("utf-8"))
  pairs, num_folds = lfw_pairs.read_pairs(str(path), root)
  assert num_folds == 1 and [p.is_same for p in pairs] == [True, False]


def test_a_bad_pairs_file_is_one_line_naming_it(tmp_path):
  root = make_folder(tmp_path / "images", [2, 2])
  path = tmp_path / "pairs.txt"
  path.write_bytes(b"1\t1\nid00\t1\t2\nid00\t1\tid\xe901\t2\n")
  with pytest.raises(DataError) as excinfo:
    lfw_pairs.read_pairs(str(path), root)
  assert error_message(excinfo) == f"{path}: not UTF-8 text (byte 0xe9 at line 3); save it as UTF-8"
  with pytest.raises(DataError) as excinfo:
    lfw_pairs.read_pairs(str(tmp_path / "images"), root)
  assert error_message(excinfo) == f"{tmp_path}/images: a folder, expected a pairs file"
  with pytest.raises(DataError) as excinfo:
    lfw_pairs.read_pairs(str(tmp_path / "none.txt"), root)
  assert error_message(excinfo) == f"{tmp_path}/none.txt: no such pairs file"
  path.write_text("1\t1\nid00\t1\t2\nid00\t1\tid01\t7\n")
  with pytest.raises(DataError) as excinfo:
    lfw_pairs.read_pairs(str(path), root)
  assert error_message(excinfo).startswith(f"{path}:3: names image {root}/id01/id01_0007.* which does not "
                                           "exist (images of the pairs are looked up under data.pairs_dir")


@pytest.mark.parametrize("key,value,message", [
    ("duplicates", "ignore", "data.duplicates='ignore' is not one of error, warn"),
    ("crop_size", 24, "data.crop_size=24 must be in 1..data.load_size=20"),
    ("pairs_file", "pairs.txt", "data.pairs_file=pairs.txt needs data.pairs_dir or data.eval_dir"),
    ("load_size", 0, "data.load_size=0 must be a positive integer"),
])
def test_read_settings_refuses_a_bad_value_before_any_file_is_listed(tmp_path, key, value, message):
  cfg = triplet_config.get_config("smoke").data
  cfg.source, cfg.train_dir = "folder", str(tmp_path / "missing")  # listed, it would be a DataError
  cfg[key] = value
  with pytest.raises(ConfigError) as excinfo:
    data.read_settings(cfg)
  assert error_message(excinfo) == message


def test_settings_are_a_frozen_copy_of_the_data_section(tmp_path):
  cfg = folder_config(tmp_path)
  settings = data.read_settings(cfg)
  assert sorted(helpers.settings_keys(settings, cfg)) == sorted(cfg.keys())  # each key once
  cfg.load_size = 99
  assert settings.images.load_size == 20 and settings.source.train_dir == cfg.train_dir
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.images.load_size = 99
