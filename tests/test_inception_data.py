"""Classification data: class folders, CSV, TF-Slim TFRecords, labels, balance, oversampling, bad input."""
import dataclasses
import logging
import os
import re
import shutil

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.data import class_labels
from common.data import listing
from common.data import pipeline
from common.data import tfrecords
from common.runtime import workdir as workdir_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from configs import inception_v4 as config_lib
import helpers
from inception_finetune import data as data_lib
from inception_finetune import synthetic

SIZE = 16  # small model inputs: the pipelines do not care


def data_config(**overrides):
  cfg = config_lib.get_config("smoke").data
  cfg.image_size = SIZE
  cfg.num_classes = 0
  cfg.eval_batch_size = 4
  cfg.min_class_count = 3
  for key, value in overrides.items():
    cfg[key] = value
  return cfg


def make_datasets(cfg, *args, **kwargs):
  """data_lib.make_datasets of the data section, read into DataSettings as the task reads it."""
  return data_lib.make_datasets(data_lib.read_settings(cfg), *args, **kwargs)


def write_image(path, color, size=12):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(np.full((size, size + 3, 3), color, np.uint8)).save(path)


def write_class_folders(root, counts, prefix=""):
  """Class i is a solid image of gray level 40 * i, so that labels can be read back from pixels."""
  for class_id, count in enumerate(counts):
    for index in range(count):
      write_image(os.path.join(root, f"breed_{class_id}", f"{prefix}{class_id}_{index}.jpg"), 40 * class_id)
  return str(root)


def first_batch(dataset):
  images, labels = next(iter(dataset))
  return images.numpy(), labels.numpy()


def all_labels(dataset):
  return np.concatenate([labels.numpy() for _, labels in dataset])


def test_class_folders_give_normalized_batches_and_a_labels_file(tmp_path):
  root = write_class_folders(tmp_path / "images", [6, 5, 4])
  data = make_datasets(data_config(source="folder", train_dir=root, min_class_count=4), 8,
                       seed=0, workdir=str(tmp_path / "run"))
  assert data.class_names == ("breed_0", "breed_1", "breed_2")
  images, labels = first_batch(data.train)
  assert images.shape == (8, SIZE, SIZE, 3) and images.dtype == np.float32
  assert labels.dtype == np.int32 and set(labels) <= {0, 1, 2}
  assert images.min() >= -1 and images.max() <= 1
  # Every class holds out at least one image; train + eval = all images.
  eval_labels = all_labels(data.eval)
  assert sorted(set(eval_labels)) == [0, 1, 2] and len(eval_labels) == data.num_eval
  assert data.train_counts.sum() + data.num_eval == 15
  labels_file = tmp_path / "run" / data_lib.LABELS_FILENAME
  assert not labels_file.exists()  # written with config.json, once the run's checks pass
  workdir_lib.write_run_config(config_lib.get_config("smoke"), str(tmp_path / "run"), data.run_files)
  assert labels_file.read_text() == "0:breed_0\n1:breed_1\n2:breed_2\n"
  assert class_labels.read_labels_file(str(labels_file)) == list(data.class_names)
  np.testing.assert_array_equal(data.train_counts, [5, 4, 3])
  balance = (tmp_path / "run" / data_lib.CLASS_BALANCE_FILENAME).read_text().splitlines()
  assert balance == ["id,name,train_images,under_min_count", "0,breed_0,5,0", "1,breed_1,4,0",
                     "2,breed_2,3,1"]


def test_eval_images_keep_their_labels_and_the_split_is_stable(tmp_path):
  root = write_class_folders(tmp_path / "images", [5, 5])
  cfg = data_config(source="folder", train_dir=root, central_fraction=1.0)
  first = make_datasets(cfg, 4, seed=0)
  second = make_datasets(cfg, 4, seed=1)
  for images, labels in first.eval:
    gray = (images.numpy().mean(axis=(1, 2, 3)) + 1) / 2 * 255
    np.testing.assert_allclose(gray, 40 * labels.numpy(), atol=3)  # JPEG rounding
  np.testing.assert_array_equal(all_labels(first.eval), all_labels(second.eval))
  # The SavedModel's evaluation set: the same images in the same order, uint8 and unresized.
  for images, _ in first.raw_eval:
    assert images.dtype == tf.uint8 and images.shape == (1, 12, 15, 3)
  np.testing.assert_array_equal(all_labels(first.raw_eval), all_labels(first.eval))


def test_train_batches_are_reproducible_for_a_seed(tmp_path):
  root = write_class_folders(tmp_path / "images", [6, 6])
  cfg = data_config(source="folder", train_dir=root, fast_mode=False)
  a, b, c = (first_batch(make_datasets(cfg, 8, seed).train) for seed in (3, 3, 4))
  np.testing.assert_array_equal(a[0], b[0])
  np.testing.assert_array_equal(a[1], b[1])
  assert not np.array_equal(a[0], c[0])


def write_csv(path, lines):
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def test_csv_of_ids_and_breed_names(tmp_path):
  images = tmp_path / "train"
  rows = ["id,breed"]
  for index, breed in enumerate(["pug", "beagle", "pug", "akita", "beagle", "pug", "akita", "beagle"]):
    write_image(str(images / f"img{index}.jpg"), 30 * index)
    rows.append(f"img{index},{breed}")
  cfg = data_config(source="csv", csv_path=write_csv(tmp_path / "labels.csv", rows),
                    images_dir=str(images))
  data = make_datasets(cfg, 4, seed=0)
  assert data.class_names == ("akita", "beagle", "pug")
  assert data.train_counts.sum() + data.num_eval == 8
  assert set(all_labels(data.eval)) == {0, 1, 2}


@pytest.mark.parametrize("rows, labels_file, expected", [
    (["id,affenpinscher,afghan_hound", "img0,1,0"], None,
     r"labels.csv:1: 3 columns; expected 'id,label'.*\(one-hot columns are not labels\)"),
    (["id,breed", "img0,pug", "img1,corgi"], "0:pug\n1:beagle\n",
     r"labels.csv:3: label 'corgi' is not a class of data.labels_file$"),
    (["img0,0", "img1,5"], "0:pug\n1:beagle\n",
     r"labels.csv:2: label 5 is out of range; expected 0..1 \(data.labels_file names 2 classes\)$"),
    (["img0,0", "img1,5"], None,
     r"labels.csv:2: label 5 is out of range; expected 0..2 \(data.num_classes=3\)$"),
])
def test_bad_csv_labels_are_named(tmp_path, rows, labels_file, expected):
  for index in range(2):
    write_image(str(tmp_path / f"img{index}.jpg"), 0)
  cfg = data_config(source="csv", csv_path=write_csv(tmp_path / "labels.csv", rows),
                    images_dir=str(tmp_path))
  if labels_file:
    (tmp_path / "labels.txt").write_text(labels_file)
    cfg.labels_file = str(tmp_path / "labels.txt")
  if not labels_file:
    cfg.num_classes = 3
  with pytest.raises(DataError, match=expected):
    make_datasets(cfg, 2, seed=0)


def write_slim_tfrecords(prefix, labels, label_values=None, cut=None):
  """TF-Slim's image_to_tfexample records; label_values overrides the label lists; record `cut`'s
  image is a PNG missing its last bytes."""
  records = []
  for index, label in enumerate(labels):
    encoded = tf.io.encode_jpeg(np.full((10, 10, 3), 20 * index, np.uint8)).numpy()
    if index == cut:
      encoded = tf.io.encode_png(np.full((10, 10, 3), 20 * index, np.uint8)).numpy()[:-16]
    values = label_values[index] if label_values else [label]
    records.append(tfrecords.make_example({
        "image/encoded": tfrecords.bytes_feature(encoded),
        "image/format": tfrecords.bytes_feature(b"jpeg"),
        "image/class/label": tfrecords.int64_feature(list(values)),
        "image/height": tfrecords.int64_feature(10),
        "image/width": tfrecords.int64_feature(10),
    }))
  tfrecords.write_tfrecord_shards(records, str(prefix), 2)
  return f"{prefix}-*.tfrecord"


def test_slim_tfrecords_with_labels_offset_and_labels_file(tmp_path):
  # Slim's ImageNet style: class 0 is "background", so real classes start at 1.
  train = write_slim_tfrecords(tmp_path / "train", [1, 2, 3, 1, 2, 3, 1])
  evaluation = write_slim_tfrecords(tmp_path / "eval", [3, 2, 1])
  (tmp_path / "labels.txt").write_text("0:pug\n1:beagle\n2:akita\n")
  cfg = data_config(source="tfrecord", train_pattern=train, eval_pattern=evaluation,
                    labels_file=str(tmp_path / "labels.txt"), labels_offset=1)
  data = make_datasets(cfg, 4, seed=0)
  assert data.class_names == ("pug", "beagle", "akita")
  np.testing.assert_array_equal(data.train_counts, [3, 2, 2])
  np.testing.assert_array_equal(np.sort(all_labels(data.eval)), [0, 1, 2])
  images, labels = first_batch(data.train)
  assert images.shape == (4, SIZE, SIZE, 3) and set(labels) <= {0, 1, 2}


@pytest.mark.parametrize("labels, label_values, expected", [
    ([0, 7], None, r"train-00001-of-00002.tfrecord: record 0: label 7 is out of range; expected 0..2"),
    ([0, 0], [[0], [0, 1, 0]], r"train-00001-of-00002.tfrecord: record 0: 3 values in image/class/label "
                               r"\(one-hot labels\?\)"),
])
def test_bad_tfrecord_labels_are_named(tmp_path, labels, label_values, expected):
  pattern = write_slim_tfrecords(tmp_path / "train", labels, label_values)
  cfg = data_config(source="tfrecord", train_pattern=pattern, eval_pattern=pattern, num_classes=3)
  with pytest.raises(DataError, match=expected):
    make_datasets(cfg, 2, seed=0)


def test_corrupt_image_is_named_or_skipped(tmp_path):
  root = write_class_folders(tmp_path / "images", [4, 4])
  broken = tmp_path / "images" / "breed_1" / "broken.jpg"
  broken.write_bytes(b"\xff\xd8 not really a jpeg")
  cfg = data_config(source="folder", train_dir=root)
  with pytest.raises(DataError, match="broken.jpg: does not decode"):
    make_datasets(cfg, 2, seed=0)
  cfg.skip_bad_files = True
  data = make_datasets(cfg, 2, seed=0)
  assert data.train_counts.sum() + data.num_eval == 8


def test_num_classes_must_match_the_data(tmp_path):
  root = write_class_folders(tmp_path / "images", [2, 2])
  with pytest.raises(ConfigError, match="data.num_classes=5, but .* has 2 classes"):
    make_datasets(data_config(source="folder", train_dir=root, num_classes=5), 2, seed=0)


def test_class_balance_report_flags_rare_classes():
  report = class_labels.class_balance_report([50, 3, 40, 7], ["a", "b", "c", "d"], min_count=10)
  assert report.splitlines() == [
      "class balance: 4 classes, 3 to 50 training images per class (median 23.5)",
      "2 classes have fewer than 10 training images: b (3), d (7)"]


def test_oversampling_draws_rare_classes_as_often_as_asked(tmp_path):
  np.testing.assert_allclose(pipeline.oversampling_acceptance([40, 5, 20], 20), [0.25, 1.0, 0.25])
  root = write_class_folders(tmp_path / "images", [44, 6])
  plain = make_datasets(data_config(source="folder", train_dir=root), 50, seed=0)
  balanced = make_datasets(
      data_config(source="folder", train_dir=root, oversample_to=40), 50, seed=0)
  np.testing.assert_array_equal(balanced.train_counts, [40, 5])

  def rare_fraction(data):
    labels = np.concatenate([labels.numpy() for _, labels in data.train.take(8)])
    return labels.mean()

  assert rare_fraction(plain) < 0.2  # 5 of 45
  assert 0.4 < rare_fraction(balanced) < 0.6  # both classes drawn as though they had 40


def test_synthetic_classes_are_deterministic_and_distinct(tmp_path):
  first = synthetic.write_synthetic_classes(str(tmp_path / "a"), 3, 4, 5, 32)
  synthetic.write_synthetic_classes(str(tmp_path / "b"), 3, 4, 5, 32)
  for split in (0, 1):
    names = sorted(os.listdir(first[split]))
    assert names == [f"class_{i:03d}" for i in range(4)]
    for name in names:
      for image in os.listdir(os.path.join(first[split], name)):
        a = (tmp_path / "a").glob(f"*/*/{name}/{image}")
        b = (tmp_path / "b").glob(f"*/*/{name}/{image}")
        assert next(a).read_bytes() == next(b).read_bytes()
  rng = np.random.default_rng(0)
  means = [synthetic.draw_synthetic_image(c, 4, 32, rng).reshape(-1, 3).mean(axis=0) for c in range(4)]
  assert min(np.abs(a - b).max() for i, a in enumerate(means) for b in means[i + 1:]) > 30


# Files that PIL reads but TensorFlow does not, and the text inputs.


def truncated_png(path, size=12):
  """A PNG missing its last 16 bytes: PIL still reads it, TensorFlow's decoder does not."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  contents = tf.io.encode_png(np.full((size, size + 3, 3), 90, np.uint8)).numpy()[:-16]
  with open(path, "wb") as f:
    f.write(contents)
  return str(path)


def one_line(excinfo):
  message = str(excinfo.value)
  assert "\n" not in message
  return message


@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_truncated_png_is_refused_up_front_or_skipped_and_counted(tmp_path, caplog, split):
  train_dir = write_class_folders(tmp_path / "train", [4, 4])
  eval_dir = write_class_folders(tmp_path / "eval", [2, 2], prefix="eval")
  bad = truncated_png(tmp_path / split / "breed_1" / "cut.png")
  cfg = data_config(source="folder", train_dir=train_dir, eval_dir=eval_dir)
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    make_datasets(cfg, 2, seed=0)
  assert one_line(excinfo).startswith(f"{bad}: does not decode as an image (TensorFlow: ")
  cfg.skip_bad_files = True
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 2, seed=0)
  assert f"skipping: {bad}: does not decode" in caplog.text
  counts = {"train": 0, "eval": 0}
  counts[split] = 1
  assert data.data_report == {"skipped_files": counts, "skipped_names": [bad]}
  # The class balance and the eval count hold the images used, not the skipped one.
  np.testing.assert_array_equal(data.train_counts, [4, 4])
  assert data.num_eval == len(all_labels(data.eval)) == len(all_labels(data.raw_eval)) == 4
  first_batch(data.train)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_tfrecord_images_are_decoded_up_front_naming_shard_and_record(tmp_path, caplog, split):
  good = write_slim_tfrecords(tmp_path / "good", [0, 1, 0, 1])
  bad = write_slim_tfrecords(tmp_path / "bad", [0, 1, 0, 1, 1], cut=3)
  shard = str(tmp_path / "bad-00001-of-00002.tfrecord")
  cfg = data_config(source="tfrecord", num_classes=2, train_pattern=bad if split == "train" else good,
                    eval_pattern=bad if split == "eval" else good)
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    make_datasets(cfg, 2, seed=0)
  assert one_line(excinfo).startswith(f"{shard}: record 1: image/encoded: does not decode as an image")
  cfg.skip_bad_files = True
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 2, seed=0)
  assert f"skipped 1 of 5 records that do not decode: {shard} record 1" in caplog.text
  counts = {"train": 0, "eval": 0}
  counts[split] = 1
  assert data.data_report == {"skipped_files": counts, "skipped_names": [f"{shard} record 1"]}
  # Record 3 (class 1) is not counted in the class balance, nor read by the pipelines.
  np.testing.assert_array_equal(data.train_counts, [2, 2])
  assert data.num_eval == len(all_labels(data.eval)) == 4
  for _ in data.train.take(6):  # several passes over the training records
    pass


def csv_config(tmp_path, text, **overrides):
  for index in range(4):
    write_image(str(tmp_path / "images" / f"img{index}.jpg"), 30 * index)
  path = tmp_path / "labels.csv"
  path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
  return data_config(source="csv", csv_path=str(path), images_dir=str(tmp_path / "images"), **overrides)


def test_a_csv_may_start_with_a_bom(tmp_path):
  cfg = csv_config(tmp_path, "\ufeffid,breed\r\nimg0,pug\r\nimg1,pug\r\nimg2,akita\r\nimg3,akita\r\n")
  data = make_datasets(cfg, 2, seed=0)
  assert data.class_names == ("akita", "pug")  # not a class "breed" from a header read as a row


@pytest.mark.parametrize("text, expected", [
    (b"id,breed\nimg0,pug\nimg1,pug\xe9\n",
     r"labels.csv: not UTF-8 text \(byte 0xe9 at line 3\); save it as UTF-8$"),
    ("id,breed\nimg0,pug\nimg1,\nimg2,akita\n", r"labels.csv:3: empty label in 'img1,'$"),
    ("img0,pug\n,akita\n", r"labels.csv:2: empty id in ',akita'$"),
    ("id,breed\nimg0,pug\nimg1,pug\nimg0,pug\n",
     r"labels.csv:4: id 'img0' is listed again \(first at line 2\); remove one, or set "
     "data.duplicates='warn' to keep the first$"),
    ("id,breed\nimg0,pug\nimg1,pug\nimg0,akita\n",
     r"labels.csv:4: id 'img0' has label 'akita' here but 'pug' at line 2; remove one, or set "
     "data.duplicates='warn'"),
    ("img0,pug\nimg7,pug\n",
     r"images/img7.jpg: no such file \(.*labels.csv:2; data.image_extension is '.jpg'\)$"),
])
def test_bad_csv_rows_are_one_line_naming_file_and_line(tmp_path, text, expected):
  with pytest.raises(DataError) as excinfo:
    make_datasets(csv_config(tmp_path, text), 2, seed=0)
  assert re.search(f"^{tmp_path}/{expected}", one_line(excinfo))


def test_a_csv_of_png_images_names_data_image_extension(tmp_path):
  cfg = csv_config(tmp_path, "img0,pug\nimg5,pug\n")
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "images" / "img5.png")
  with pytest.raises(DataError) as excinfo:
    make_datasets(cfg, 2, seed=0)
  assert one_line(excinfo) == (
      f"{tmp_path}/images/img5.jpg: no such file ({tmp_path}/labels.csv:2; data.image_extension is '.jpg'; "
      "img5.png exists: set data.image_extension='.png')")


def test_a_folder_or_nothing_where_the_csv_should_be_is_named(tmp_path):
  cfg = csv_config(tmp_path, "img0,pug\n")
  cfg.csv_path = str(tmp_path / "images")
  with pytest.raises(DataError, match=f"^{tmp_path}/images: a folder, expected a CSV file$"):
    make_datasets(cfg, 2, seed=0)
  cfg.csv_path = str(tmp_path / "none.csv")
  with pytest.raises(DataError, match=f"^{tmp_path}/none.csv: no such CSV file$"):
    make_datasets(cfg, 2, seed=0)


def test_duplicates_warn_keeps_the_first_row(tmp_path, caplog):
  cfg = csv_config(tmp_path, "img0,pug\nimg1,pug\nimg2,akita\nimg3,akita\nimg0,akita\n", duplicates="warn")
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 2, seed=0)
  assert ("labels.csv:5: id 'img0' has label 'akita' here but 'pug' at line 1; keeping the first"
          in caplog.text)
  assert data.train_counts.sum() + data.num_eval == 4


@pytest.mark.parametrize("text, expected", [
    ("0:pug\n1:beagle\n1:akita\n",
     r"labels.txt:3: class id '1' has name 'akita' here but 'beagle' at line 2"),
    ("0:pug\n1:beagle\n1:beagle\n", r"labels.txt:3: class id '1' is listed again \(first at line 2\)"),
    ("0:pug\n1:beagle\n2:pug\n", r"labels.txt:3: class name 'pug' has id '2' here but '0' at line 1"),
    ("0:pug\n1:\n", r"labels.txt:2: expected '<id>:<name>', got '1:'$"),
    (b"0:pug\n1:b\xe9agle\n", r"labels.txt: not UTF-8 text \(byte 0xe9 at line 2\); save it as UTF-8$"),
])
def test_bad_labels_files_are_one_line_naming_file_and_line(tmp_path, text, expected):
  path = tmp_path / "labels.txt"
  path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
  with pytest.raises(DataError) as excinfo:
    class_labels.read_labels_file(str(path))
  assert re.search(f"^{path}{expected[len('labels.txt'):]}", one_line(excinfo))


def test_labels_file_duplicates_warn_keeps_the_first(tmp_path, caplog):
  path = tmp_path / "labels.txt"
  path.write_text("\ufeff0:pug\r\n1:beagle\r\n1:akita\r\n")
  with caplog.at_level(logging.WARNING):
    assert class_labels.read_labels_file(str(path), "warn") == ["pug", "beagle"]
  assert "labels.txt:3: class id '1' has name 'akita' here but 'beagle' at line 2; keeping the first" \
      in caplog.text


def test_an_image_in_train_and_eval_folders_is_named(tmp_path, caplog):
  train_dir = write_class_folders(tmp_path / "train", [3, 3])
  eval_dir = write_class_folders(tmp_path / "eval", [1, 1])
  cfg = data_config(source="folder", train_dir=train_dir, eval_dir=eval_dir)
  with pytest.raises(DataError) as excinfo:
    make_datasets(cfg, 2, seed=0)
  assert one_line(excinfo) == (
      f"{eval_dir}/breed_0/0_0.jpg: image 'breed_0/0_0.jpg' is in the training split too "
      f"({train_dir}/breed_0/0_0.jpg) (1 more); remove it from one split, or set data.duplicates='warn' to "
      "keep both")
  cfg.duplicates = "warn"
  with caplog.at_level(logging.WARNING):
    data = make_datasets(cfg, 2, seed=0)
  assert "kept in both splits" in caplog.text and data.num_eval == 2


def test_a_source_with_nothing_to_hold_out_is_named(tmp_path):
  cfg = csv_config(tmp_path, "img0,pug\nimg1,akita\n")
  with pytest.raises(DataError, match=f"^{tmp_path}/labels.csv: no image is held out for evaluation"):
    make_datasets(cfg, 2, seed=0)


def eval_batches(data):
  return [(images.numpy(), labels.numpy()) for images, labels in data.eval]


def test_an_evaluation_checks_the_evaluation_images_only_with_the_runs_classes(tmp_path):
  """for_training=False: the same evaluation pipeline with the training files gone or corrupt, the class
  names and counts of the run's labels.txt and class_balance.csv, the training data read only if asked."""
  train_dir = write_class_folders(tmp_path / "train", [5, 4, 3])
  eval_dir = write_class_folders(tmp_path / "eval", [2, 2, 2], prefix="e")
  rows = ["id,breed"]
  for index, breed in enumerate(["pug", "beagle", "pug", "akita", "beagle", "pug", "akita", "beagle"]):
    write_image(str(tmp_path / "csv_images" / f"img{index}.jpg"), 30 * index)
    rows.append(f"img{index},{breed}")
  records = {split: write_slim_tfrecords(tmp_path / split, labels)
             for split, labels in (("train", [0, 1, 2, 0, 1]), ("eval", [2, 1, 0]))}
  cases = {
      "folder": data_config(source="folder", train_dir=train_dir, eval_dir=eval_dir),
      "csv": data_config(source="csv", csv_path=write_csv(tmp_path / "labels.csv", rows),
                         images_dir=str(tmp_path / "csv_images")),
      "tfrecord": data_config(source="tfrecord", num_classes=3, train_pattern=records["train"],
                              eval_pattern=records["eval"]),
  }
  for name, cfg in cases.items():
    workdir = tmp_path / f"run_{name}"
    trained = make_datasets(cfg, 4, seed=0, workdir=str(workdir))
    workdir.mkdir()
    for file_name, text in trained.run_files.items():  # as the training loop writes them
      (workdir / file_name).write_text(text)
    if name == "folder":
      shutil.rmtree(train_dir)
    elif name == "csv":  # the CSV's rows give the split; the training images are not decoded
      for path in trained.train_files:
        with open(path, "wb") as f:
          f.write(b"not an image")
    else:
      cfg.train_pattern = str(tmp_path / "nowhere-*")
    data = make_datasets(cfg, 4, seed=0, workdir=str(workdir), for_training=False)
    assert data.train is None and data.class_names == trained.class_names, name
    np.testing.assert_array_equal(data.train_counts, trained.train_counts, err_msg=name)
    got, want = eval_batches(data), eval_batches(trained)
    assert len(got) == len(want) >= 1, name
    for (images, labels), (want_images, want_labels) in zip(got, want):
      np.testing.assert_array_equal(images, want_images, err_msg=name)
      np.testing.assert_array_equal(labels, want_labels, err_msg=name)
  # An evaluation never reads the training data (the checkpoints hold the BatchNorm calibration).
  assert make_datasets(cases["folder"], 4, 0, str(tmp_path / "run_folder"), for_training=False).new_train is None
  # An evaluation folder whose classes are not the run's is named.
  os.makedirs(os.path.join(eval_dir, "breed_9"))
  write_image(os.path.join(eval_dir, "breed_9", "x.jpg"), 200)
  with pytest.raises(DataError, match=re.escape(f"{eval_dir}: class folders differ from the run's classes "
                                                "(e.g. breed_9)")):
    make_datasets(cases["folder"], 4, 0, str(tmp_path / "run_folder"), for_training=False)


@pytest.mark.parametrize("overrides,message", [
    ({"source": "voc"}, "data.source 'voc' is unknown; choose one of synthetic, folder, csv, tfrecord, tfds"),
    ({"num_classes": -1}, "data.num_classes=-1: data.source='folder' needs 2 or more (0 = from the data, "
                          "for folders, CSVs and labels files)"),
    ({"eval_fraction": 1.0}, "data.eval_fraction must be in (0, 1), got 1.0"),
    ({"shuffle_buffer": 0}, "data.shuffle_buffer must be >= 1, got 0"),
    ({"oversample_to": -1}, "data.oversample_to must be >= 0 (0 = off), got -1"),
    ({"duplicates": "keep"}, "data.duplicates='keep' is not one of error, warn"),
    ({"central_fraction": 1.5}, "data.central_fraction=1.5 must be a number in [0, 1]"),
    ({"source": "synthetic", "num_classes": 3, "synthetic_images_per_class": 1},
     "data.synthetic_images_per_class must be >= 2, got 1"),
])
def test_read_settings_refuses_a_bad_value_before_any_file_is_listed(tmp_path, overrides, message):
  cfg = data_config(**{"source": "folder", "train_dir": str(tmp_path / "missing"), **overrides})
  with pytest.raises(ConfigError) as excinfo:
    data_lib.read_settings(cfg)
  assert one_line(excinfo) == message


def test_settings_are_a_frozen_copy_and_a_source_without_classes_is_refused_before_writing(tmp_path):
  cfg = data_config(source="synthetic", cache_dir=str(tmp_path / "cache"))
  settings = data_lib.read_settings(cfg)  # num_classes 0 is a setting of its own (from the data)
  assert sorted(helpers.settings_keys(settings, cfg)) == sorted(cfg.keys())  # each key once
  cfg.image_size = 99
  assert settings.image_size == SIZE
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.image_size = 99
  with pytest.raises(ConfigError) as excinfo:
    data_lib.make_datasets(settings, 2, seed=0)
  assert one_line(excinfo).startswith("data.num_classes=0: data.source='synthetic' needs 2 or more")
  assert not os.path.exists(tmp_path / "cache")
