"""Tests of common/data.py: listings, image checks, TFRecords and streamed .npy arrays."""
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common import data
from common.errors import DataError


def write_png(path, array):
  Image.fromarray(array).save(path)
  return str(path)


def make_images(folder, count, size=(6, 5)):
  """Writes `count` small RGB PNGs whose red channel at (0, 0) is their index."""
  folder.mkdir(exist_ok=True)
  paths = []
  for i in range(count):
    array = np.zeros(size + (3,), np.uint8)
    array[0, 0, 0] = i
    paths.append(write_png(folder / f"img{i:03d}.png", array))
  return paths


def write_corrupt(path):
  path.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
  return str(path)


def test_list_files_is_sorted_and_filters_extensions(tmp_path):
  for name in ["b.PNG", "a.jpg", "c.txt", "d.png"]:
    (tmp_path / name).write_bytes(b"x")
  paths = data.list_files(str(tmp_path), [".png", ".jpg"])
  assert [os.path.basename(p) for p in paths] == ["a.jpg", "b.PNG", "d.png"]


def test_list_files_names_empty_and_missing_folders(tmp_path):
  (tmp_path / "notes.txt").write_bytes(b"x")
  with pytest.raises(DataError, match=str(tmp_path)):
    data.list_files(str(tmp_path), [".png"])
  with pytest.raises(DataError, match="nowhere: no such directory"):
    data.list_files(str(tmp_path / "nowhere"), [".png"])


def test_check_images_names_the_first_corrupt_file(tmp_path):
  paths = make_images(tmp_path, 5)
  bad = write_corrupt(tmp_path / "img002.png")
  with pytest.raises(DataError, match=f"^{bad}: does not decode"):
    data.check_images(paths, skip_bad_files=False)


def test_check_images_skips_and_counts_bad_files(tmp_path):
  paths = make_images(tmp_path, 6)
  write_corrupt(tmp_path / "img001.png")
  (tmp_path / "img004.png").write_bytes(b"")
  good, num_skipped = data.check_images(paths, skip_bad_files=True)
  assert num_skipped == 2
  assert good == [p for i, p in enumerate(paths) if i not in (1, 4)]


def test_check_image_rejects_formats_tensorflow_does_not_read(tmp_path):
  path = tmp_path / "img.tif"
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(path, format="TIFF")
  with pytest.raises(data.UndecodableFileError, match="TIFF images are not read by TensorFlow"):
    data.check_image(str(path))


def test_check_files_keeps_order_and_infos_of_a_long_list(tmp_path):
  items = list(range(1200))

  def check(i):
    if i % 100 == 7:
      raise data.UndecodableFileError(f"item {i}")
    return i * 2

  good, infos, num_skipped = data.check_files(items, check, skip_bad_files=True)
  assert num_skipped == 12
  assert good == [i for i in items if i % 100 != 7]
  assert infos == [2 * i for i in good]


def test_check_files_always_raises_inconsistent_items():
  def check(i):
    if i == 3:
      raise DataError("item 3 is inconsistent")
    return i

  with pytest.raises(DataError, match="item 3 is inconsistent"):
    data.check_files(range(10), check, skip_bad_files=True)


def test_decode_image_gives_uint8_with_static_channels(tmp_path):
  gray = write_png(tmp_path / "g.png", np.full((3, 4), 7, np.uint8))
  image = data.decode_image(tf.io.read_file(gray), channels=3)
  assert image.shape == (3, 4, 3) and image.dtype == tf.uint8
  assert int(tf.reduce_max(image)) == 7


def test_tfrecord_shards_round_trip(tmp_path):
  records = [data.make_example({"id": data.int64_feature(i), "name": data.bytes_feature(f"n{i}")})
             for i in range(10)]
  paths = data.write_tfrecord_shards(records, str(tmp_path / "out" / "train"), num_shards=3)
  assert [os.path.basename(p) for p in paths] == [
      "train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord", "train-00002-of-00003.tfrecord"]
  spec = {"id": tf.io.FixedLenFeature([], tf.int64), "name": tf.io.FixedLenFeature([], tf.string)}
  ordered = data.read_tfrecords(str(tmp_path / "out" / "train-*.tfrecord"))
  ids = [int(tf.io.parse_single_example(r, spec)["id"]) for r in ordered]
  assert sorted(ids) == list(range(10))
  assert ids[:4] == [0, 3, 6, 9]  # round-robin shards, read in file order
  shuffled = data.read_tfrecords(str(tmp_path / "out" / "train-*.tfrecord"), shuffle_seed=1, repeat=True)
  ids = [int(tf.io.parse_single_example(r, spec)["id"]) for r in shuffled.take(20)]
  assert sorted(ids) == sorted(list(range(10)) * 2)


def test_read_tfrecords_names_a_pattern_without_files(tmp_path):
  with pytest.raises(DataError, match="no files match .*missing-\\*"):
    data.read_tfrecords(str(tmp_path / "missing-*.tfrecord"))


@pytest.mark.parametrize("dtype", ["uint8", "float32", ">i4", "int64"])
def test_npy_records_match_the_array(tmp_path, dtype):
  array = np.arange(7 * 2 * 3).reshape(7, 2, 3).astype(dtype)
  path = str(tmp_path / "a.npy")
  np.save(path, array)
  info = data.read_npy_header(path)
  assert info.shape == (7, 2, 3)
  records = np.stack([r.numpy() for r in data.read_npy_records(info)])
  np.testing.assert_array_equal(records, array)
  middle = np.stack([r.numpy() for r in data.read_npy_records(info, 2, 5)])
  np.testing.assert_array_equal(middle, array[2:5])


@pytest.mark.parametrize("array, message", [
    (np.asfortranarray(np.zeros((4, 3, 2), np.uint8)), "Fortran order"),
    (np.array([None, 1], dtype=object), "dtype object"),
    (np.zeros((0, 3), np.float32), "has no records"),
    (np.zeros((3,), np.uint32), "dtype uint32 is not supported"),
])
def test_read_npy_header_rejects_arrays_it_cannot_stream(tmp_path, array, message):
  path = str(tmp_path / "bad.npy")
  np.save(path, array, allow_pickle=True)
  with pytest.raises(DataError, match=f"bad.npy: .*{message}"):
    data.read_npy_header(path)


def test_read_npy_header_names_truncated_and_foreign_files(tmp_path):
  path = tmp_path / "cut.npy"
  np.save(path, np.zeros((10, 4), np.float32))
  path.write_bytes(path.read_bytes()[:-5])
  with pytest.raises(DataError, match="cut.npy: file is .* bytes, its header says"):
    data.read_npy_header(str(path))
  text = tmp_path / "text.npy"
  text.write_text("hello")
  with pytest.raises(DataError, match="text.npy: not a .npy file"):
    data.read_npy_header(str(text))


@pytest.mark.parametrize("value, word", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_check_npy_finite_names_the_first_bad_index(tmp_path, value, word, monkeypatch):
  monkeypatch.setattr(data, "_SCAN_CHUNK_BYTES", 100)  # several chunks, so the index is global
  array = np.ones((50, 2, 2), np.float32)
  array[37, 1, 0] = value
  array[45, 0, 0] = np.nan
  path = str(tmp_path / "patches.npy")
  np.save(path, array)
  with pytest.raises(DataError, match=f"patches.npy: index 37 contains {word}$"):
    data.check_npy_finite(data.read_npy_header(path))


def test_check_npy_finite_returns_the_range(tmp_path):
  array = np.linspace(-2, 3, 40, dtype=np.float32).reshape(10, 4)
  path = str(tmp_path / "ok.npy")
  np.save(path, array)
  assert data.check_npy_finite(data.read_npy_header(path)) == (-2.0, 3.0)


def test_check_npy_labels_names_the_first_out_of_range_index(tmp_path, monkeypatch):
  monkeypatch.setattr(data, "_SCAN_CHUNK_BYTES", 64)
  labels = np.zeros((40, 4, 4), np.uint8)
  labels[5] = 255  # the ignore label is fine
  labels[23, 2, 3] = 7
  path = str(tmp_path / "labels.npy")
  np.save(path, labels)
  info = data.read_npy_header(path)
  with pytest.raises(DataError, match="labels.npy: index 23 has label 7, expected 0..4 or 255"):
    data.check_npy_labels(info, num_classes=5, ignore_label=255)
  with pytest.raises(DataError, match="labels.npy: index 5 has label 255, expected 0..7$"):
    data.check_npy_labels(info, num_classes=8)


def test_check_npy_labels_requires_integers(tmp_path):
  path = str(tmp_path / "labels.npy")
  np.save(path, np.zeros((3, 2), np.float32))
  with pytest.raises(DataError, match="labels must be integers, got dtype float32"):
    data.check_npy_labels(data.read_npy_header(path), num_classes=2)


def test_read_shuffled_blocks_covers_every_record_each_pass(tmp_path):
  path = str(tmp_path / "ids.npy")
  np.save(path, np.arange(103, dtype=np.int32)[:, None])
  info = data.read_npy_header(path)

  def read(seed):
    dataset = data.read_shuffled_blocks(103, lambda a, b: data.read_npy_records(info, a, b), seed=seed,
                                        block_records=10, cycle_length=4)
    return next(iter(dataset.take(1030).batch(1030)))[:, 0].numpy().tolist()

  values = read(seed=3)
  # Passes overlap by at most the blocks being interleaved (4 x 10 records).
  assert set(values[:103 + 40]) == set(range(103))
  assert set(np.bincount(values, minlength=103)) <= {9, 10, 11}
  assert values[:103] != list(range(103))
  assert read(seed=3) == values
  assert read(seed=4) != values
