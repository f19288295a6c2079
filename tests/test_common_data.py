"""Tests of common/data: listings, image checks, text inputs, TFRecords and streamed .npy arrays."""
import io
import logging
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.data import image_checks
from common.data import listing
from common.data import npy
from common.data import text_inputs
from common.data import tfrecords
from common.contract.errors import ConfigError
from common.contract.errors import DataError


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
  paths = listing.list_files(str(tmp_path), [".png", ".jpg"])
  assert [os.path.basename(p) for p in paths] == ["a.jpg", "b.PNG", "d.png"]


def test_list_files_names_empty_and_missing_folders(tmp_path):
  (tmp_path / "notes.txt").write_bytes(b"x")
  with pytest.raises(DataError, match=str(tmp_path)):
    listing.list_files(str(tmp_path), [".png"])
  with pytest.raises(DataError, match="nowhere: no such directory"):
    listing.list_files(str(tmp_path / "nowhere"), [".png"])


def test_check_images_names_the_first_corrupt_file(tmp_path):
  paths = make_images(tmp_path, 5)
  bad = write_corrupt(tmp_path / "img002.png")
  with pytest.raises(DataError, match=f"^{bad}: does not decode"):
    image_checks.check_images(paths, skip_bad_files=False)


def test_check_images_skips_and_counts_bad_files(tmp_path):
  paths = make_images(tmp_path, 6)
  write_corrupt(tmp_path / "img001.png")
  (tmp_path / "img004.png").write_bytes(b"")
  good, skipped = image_checks.check_images(paths, skip_bad_files=True)
  assert skipped == [paths[1], paths[4]]
  assert good == [p for i, p in enumerate(paths) if i not in (1, 4)]


def test_check_image_rejects_formats_tensorflow_does_not_read(tmp_path):
  path = tmp_path / "img.tif"
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(path, format="TIFF")
  with pytest.raises(listing.UndecodableFileError, match="TIFF images are not read by TensorFlow"):
    image_checks.check_image(str(path))


def test_check_files_keeps_order_and_infos_of_a_long_list(tmp_path):
  items = list(range(1200))

  def check(i):
    if i % 100 == 7:
      raise listing.UndecodableFileError(f"item {i}")
    return i * 2

  good, infos, skipped = image_checks.check_files(items, check, skip_bad_files=True)
  assert skipped == [str(i) for i in items if i % 100 == 7]
  assert good == [i for i in items if i % 100 != 7]
  assert infos == [2 * i for i in good]


def test_check_files_always_raises_inconsistent_items():
  def check(i):
    if i == 3:
      raise DataError("item 3 is inconsistent")
    return i

  with pytest.raises(DataError, match="item 3 is inconsistent"):
    image_checks.check_files(range(10), check, skip_bad_files=True)


def test_decode_image_gives_uint8_with_static_channels(tmp_path):
  gray = write_png(tmp_path / "g.png", np.full((3, 4), 7, np.uint8))
  image = image_checks.decode_image(tf.io.read_file(gray), channels=3)
  assert image.shape == (3, 4, 3) and image.dtype == tf.uint8
  assert int(tf.reduce_max(image)) == 7


def test_tfrecord_shards_round_trip(tmp_path):
  records = [tfrecords.make_example({"id": tfrecords.int64_feature(i), "name": tfrecords.bytes_feature(f"n{i}")})
             for i in range(10)]
  paths = tfrecords.write_tfrecord_shards(records, str(tmp_path / "out" / "train"), num_shards=3)
  assert [os.path.basename(p) for p in paths] == [
      "train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord", "train-00002-of-00003.tfrecord"]
  spec = {"id": tf.io.FixedLenFeature([], tf.int64), "name": tf.io.FixedLenFeature([], tf.string)}
  ordered = tfrecords.read_tfrecords(str(tmp_path / "out" / "train-*.tfrecord"))
  ids = [int(tf.io.parse_single_example(r, spec)["id"]) for r in ordered]
  assert sorted(ids) == list(range(10))
  assert ids[:4] == [0, 3, 6, 9]  # round-robin shards, read in file order
  shuffled = tfrecords.read_tfrecords(str(tmp_path / "out" / "train-*.tfrecord"), shuffle_seed=1, repeat=True)
  ids = [int(tf.io.parse_single_example(r, spec)["id"]) for r in shuffled.take(20)]
  assert sorted(ids) == sorted(list(range(10)) * 2)


def test_read_tfrecords_names_a_pattern_without_files(tmp_path):
  with pytest.raises(DataError, match="no files match .*missing-\\*"):
    tfrecords.read_tfrecords(str(tmp_path / "missing-*.tfrecord"))


@pytest.mark.parametrize("dtype", ["uint8", "float32", ">i4", "int64"])
def test_npy_records_match_the_array(tmp_path, dtype):
  array = np.arange(7 * 2 * 3).reshape(7, 2, 3).astype(dtype)
  path = str(tmp_path / "a.npy")
  np.save(path, array)
  info = npy.read_npy_header(path)
  assert info.shape == (7, 2, 3)
  records = np.stack([r.numpy() for r in npy.read_npy_records(info)])
  np.testing.assert_array_equal(records, array)
  middle = np.stack([r.numpy() for r in npy.read_npy_records(info, 2, 5)])
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
    npy.read_npy_header(path)


def test_read_npy_header_names_truncated_and_foreign_files(tmp_path):
  path = tmp_path / "cut.npy"
  np.save(path, np.zeros((10, 4), np.float32))
  path.write_bytes(path.read_bytes()[:-5])
  with pytest.raises(DataError, match="cut.npy: file is .* bytes, its header says"):
    npy.read_npy_header(str(path))
  text = tmp_path / "text.npy"
  text.write_text("hello")
  with pytest.raises(DataError, match="text.npy: not a .npy file"):
    npy.read_npy_header(str(text))


@pytest.mark.parametrize("value, word", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_check_npy_finite_names_the_first_bad_index(tmp_path, value, word, monkeypatch):
  monkeypatch.setattr(npy, "_SCAN_CHUNK_BYTES", 100)  # several chunks, so the index is global
  array = np.ones((50, 2, 2), np.float32)
  array[37, 1, 0] = value
  array[45, 0, 0] = np.nan
  path = str(tmp_path / "patches.npy")
  np.save(path, array)
  with pytest.raises(DataError, match=f"patches.npy: index 37 contains {word}$"):
    npy.check_npy_finite(npy.read_npy_header(path))


def test_check_npy_finite_returns_the_range(tmp_path):
  array = np.linspace(-2, 3, 40, dtype=np.float32).reshape(10, 4)
  path = str(tmp_path / "ok.npy")
  np.save(path, array)
  assert npy.check_npy_finite(npy.read_npy_header(path)) == (-2.0, 3.0)


def test_check_npy_labels_names_the_first_out_of_range_index(tmp_path, monkeypatch):
  monkeypatch.setattr(npy, "_SCAN_CHUNK_BYTES", 64)
  labels = np.zeros((40, 4, 4), np.uint8)
  labels[5] = 255  # the ignore label is fine
  labels[23, 2, 3] = 7
  path = str(tmp_path / "labels.npy")
  np.save(path, labels)
  info = npy.read_npy_header(path)
  with pytest.raises(DataError, match="labels.npy: index 23 has label 7, expected 0..4 or 255"):
    npy.check_npy_labels(info, num_classes=5, ignore_label=255)
  with pytest.raises(DataError, match="labels.npy: index 5 has label 255, expected 0..7$"):
    npy.check_npy_labels(info, num_classes=8)


def test_check_npy_labels_requires_integers(tmp_path):
  path = str(tmp_path / "labels.npy")
  np.save(path, np.zeros((3, 2), np.float32))
  with pytest.raises(DataError, match="labels must be integers, got dtype float32"):
    npy.check_npy_labels(npy.read_npy_header(path), num_classes=2)


def test_read_shuffled_blocks_covers_every_record_each_pass(tmp_path):
  path = str(tmp_path / "ids.npy")
  np.save(path, np.arange(103, dtype=np.int32)[:, None])
  info = npy.read_npy_header(path)

  def read(seed):
    dataset = npy.read_shuffled_blocks(103, lambda a, b: npy.read_npy_records(info, a, b), seed=seed,
                                        block_records=10, cycle_length=4)
    return next(iter(dataset.take(1030).batch(1030)))[:, 0].numpy().tolist()

  values = read(seed=3)
  # Passes overlap by at most the blocks being interleaved (4 x 10 records).
  assert set(values[:103 + 40]) == set(range(103))
  assert set(np.bincount(values, minlength=103)) <= {9, 10, 11}
  assert values[:103] != list(range(103))
  assert read(seed=3) == values
  assert read(seed=4) != values


# Checks that decode as TensorFlow does, and the text reader.


def encoded(image, image_format, **kwargs):
  buffer = io.BytesIO()
  image.save(buffer, format=image_format, **kwargs)
  return buffer.getvalue()


def pil_loads(contents):
  with Image.open(io.BytesIO(contents)) as img:
    img.load()


def flip_idat_crc(png):
  index = png.index(b"IDAT")
  length = int.from_bytes(png[index - 4:index], "big")
  broken = bytearray(png)
  broken[index + 4 + length] ^= 0xFF
  return bytes(broken)


RGB = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 21, 3), np.uint8))
GRAY = Image.fromarray(np.random.default_rng(1).integers(0, 256, (20, 21), np.uint8))


# Files that PIL's full load() reads but TensorFlow's decoders refuse (measured
# with Pillow and TensorFlow 2.21): a PNG missing up to its last ~20 bytes (IEND,
# the last IDAT's CRC and the zlib checksum), a bad IDAT CRC, a GIF missing its
# last two bytes, a 1-bit BMP, a BMP missing a byte of its last row's padding.
@pytest.mark.parametrize("name, contents", [
    ("cut_4.png", encoded(RGB, "PNG")[:-4]),
    ("cut_12.png", encoded(RGB, "PNG")[:-12]),
    ("cut_16.png", encoded(RGB, "PNG")[:-16]),
    ("cut_20.png", encoded(GRAY, "PNG")[:-20]),
    ("idat_crc.png", flip_idat_crc(encoded(RGB, "PNG"))),
    ("cut_2.gif", encoded(GRAY.convert("P"), "GIF")[:-2]),
    ("one_bit.bmp", encoded(GRAY.convert("1"), "BMP")),
    ("cut_1.bmp", encoded(RGB, "BMP")[:-1]),
])
def test_check_image_refuses_what_tensorflow_does_not_decode(tmp_path, name, contents):
  pil_loads(contents)  # PIL reads it: a PIL-only check let it through
  path = tmp_path / name
  path.write_bytes(contents)
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    image_checks.check_image(str(path))
  message = str(excinfo.value)
  assert message.startswith(f"{path}: does not decode as an image (TensorFlow: ") and "\n" not in message
  assert "{{" not in message and "[Op:" not in message


def test_check_image_names_a_truncated_png_or_skips_it(tmp_path, caplog):
  paths = make_images(tmp_path, 4)
  cut = tmp_path / "img002.png"
  cut.write_bytes(cut.read_bytes()[:-16])
  with pytest.raises(DataError) as excinfo:
    image_checks.check_images(paths, skip_bad_files=False)
  assert str(excinfo.value).startswith(f"{cut}: does not decode as an image (TensorFlow: ")
  assert str(excinfo.value).endswith("; data.skip_bad_files=True skips such files")
  with caplog.at_level(logging.WARNING):
    good, skipped = image_checks.check_images(paths, skip_bad_files=True)
  assert good == [p for p in paths if p != str(cut)] and skipped == [str(cut)]
  assert f"skipping: {cut}: does not decode" in caplog.text
  assert f"skipped 1 of 4 files that do not decode: {cut}" in caplog.text


def test_check_image_names_missing_files_and_folders(tmp_path):
  with pytest.raises(DataError, match=f"^{tmp_path}/none.png: no such file$"):
    image_checks.check_image(str(tmp_path / "none.png"))
  (tmp_path / "dir.png").mkdir()
  with pytest.raises(DataError, match=f"^{tmp_path}/dir.png: a folder, expected a file$"):
    image_checks.check_image(str(tmp_path / "dir.png"))


def test_list_files_names_what_it_leaves_out(tmp_path, caplog):
  make_images(tmp_path, 2)
  (tmp_path / "photo.webp").write_bytes(b"x")
  (tmp_path / ".DS_Store").write_bytes(b"x")
  with caplog.at_level(logging.WARNING):
    assert len(listing.list_files(str(tmp_path), [".png"])) == 2
  assert f"{tmp_path}: left out 1 files not ending in .png, e.g. photo.webp" in caplog.text


def write_records(tmp_path, contents_list, num_shards=2):
  records = [tfrecords.make_example({"image": tfrecords.bytes_feature(c), "id": tfrecords.int64_feature(i)})
             for i, c in enumerate(contents_list)]
  tfrecords.write_tfrecord_shards(records, str(tmp_path / "rec"), num_shards, log_every=0)
  return str(tmp_path / "rec-*.tfrecord")


RECORD_SPEC = {"image": tf.io.FixedLenFeature([], tf.string), "id": tf.io.FixedLenFeature([], tf.int64)}


def record_values(record):
  features = tfrecords.parse_example(record, RECORD_SPEC)
  image = image_checks.tf_decoded("image", image_checks.decode_image, features["image"])
  return features["id"], tf.shape(image)


def check_values(record_id, shape):
  if shape[0] != 20:
    raise DataError(f"image is {shape[0]} rows high")
  return int(record_id)


def test_check_tfrecords_names_shard_and_record_or_skips_them(tmp_path, caplog):
  png = encoded(RGB, "PNG")
  pattern = write_records(tmp_path, [png, png, png, png[:-16], png, b"not an image"])
  shard1 = str(tmp_path / "rec-00001-of-00002.tfrecord")
  with pytest.raises(listing.UndecodableFileError) as excinfo:
    tfrecords.check_tfrecords(pattern, record_values, check_values, skip_bad_files=False)
  message = str(excinfo.value)
  # Round-robin shards: record 3 is the second of shard 1.
  assert message.startswith(f"{shard1}: record 1: image: does not decode as an image (TensorFlow: ")
  assert "\n" not in message
  with caplog.at_level(logging.WARNING):
    ids, skip = tfrecords.check_tfrecords(pattern, record_values, check_values, skip_bad_files=True)
  assert ids == [0, 2, 4, 1] and skip == [(shard1, 1), (shard1, 2)]
  assert f"skipped 2 of 6 records that do not decode: {shard1} record 1, {shard1} record 2" in caplog.text
  # The pipelines read the same files without the skipped records.
  ordered = tfrecords.read_tfrecords(pattern, skip=skip)
  assert [int(tf.io.parse_single_example(r, RECORD_SPEC)["id"]) for r in ordered] == [0, 2, 4, 1]
  shuffled = tfrecords.read_tfrecords(pattern, shuffle_seed=3, repeat=True, skip=skip)
  ids = [int(tf.io.parse_single_example(r, RECORD_SPEC)["id"]) for r in shuffled.take(12)]
  assert sorted(ids) == sorted([0, 1, 2, 4] * 3)


@pytest.mark.parametrize("undecodable", [False, True])
@pytest.mark.parametrize("skip_bad_files", [False, True])
def test_check_tfrecords_names_bad_values_in_either_pass(tmp_path, undecodable, skip_bad_files):
  png, short = encoded(RGB, "PNG"), encoded(RGB.crop((0, 0, 21, 10)), "PNG")
  # Round-robin shards: shard 1 holds records 1, 3 and 5. Without an undecodable
  # record it is checked in one tf.data pass, with one record by record.
  pattern = write_records(tmp_path, [png, png, png, short, png, b"x" if undecodable else png])
  with pytest.raises(DataError) as excinfo:
    tfrecords.check_tfrecords(pattern, record_values, check_values, skip_bad_files)
  assert str(excinfo.value) == f"{tmp_path}/rec-00001-of-00002.tfrecord: record 1: image is 10 rows high"


def test_check_tfrecords_names_records_of_another_kind_and_unreadable_files(tmp_path):
  pattern = write_records(tmp_path, [b"x"], num_shards=1)
  spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
  with pytest.raises(listing.UndecodableFileError, match=r"rec-00000-of-00001.tfrecord: record 0: not a "
                                                      r"tf.train.Example with image, label \(.*label"):
    tfrecords.check_tfrecords(pattern, lambda r: tfrecords.parse_example(r, spec)["label"], int, False)
  (tmp_path / "rec-00000-of-00001.tfrecord").write_bytes(b"not a tfrecord file at all")
  with pytest.raises(DataError, match=r"rec-00000-of-00001.tfrecord: not a readable TFRecord file "
                                      r"\(at record 0"):
    tfrecords.check_tfrecords(pattern, record_values, check_values, False)


def test_read_text_lines_reads_utf8_with_or_without_a_bom(tmp_path):
  path = tmp_path / "ids.txt"
  path.write_bytes("\ufeffcafé\r\n\r\n  \nsecond line\n".encode("utf-8"))
  assert text_inputs.read_text_lines(str(path), "split file") == [(1, "café"), (4, "second line")]
  csv_path = tmp_path / "labels.csv"
  csv_path.write_bytes("\ufeffid,label\r\na, pug \r\n\r\n\"b,c\",beagle\r\n".encode("utf-8"))
  assert text_inputs.read_csv_rows(str(csv_path), "CSV file") == [(1, ["id", "label"]), (2, ["a", "pug"]),
                                                           (4, ["b,c", "beagle"])]


def test_read_text_names_bad_encodings_folders_and_missing_files(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("ok\nstill ok\nnaïve\n".encode("latin-1"))
  with pytest.raises(DataError) as excinfo:
    text_inputs.read_text_lines(str(path), "split file")
  assert str(excinfo.value) == f"{path}: not UTF-8 text (byte 0xef at line 3); save it as UTF-8"
  with pytest.raises(DataError, match=f"^{tmp_path}: a folder, expected a split file$"):
    text_inputs.read_text_lines(str(tmp_path), "split file")
  with pytest.raises(DataError, match=f"^{tmp_path}/none.txt: no such pairs file$"):
    text_inputs.read_text_lines(str(tmp_path / "none.txt"), "pairs file")


def test_first_entries_refuses_or_warns_about_duplicates(caplog):
  entries = [("a", "pug", 2), ("b", "akita", 3), ("a", "pug", 5), ("b", "beagle", 7)]
  with pytest.raises(DataError) as excinfo:
    text_inputs.first_entries(entries, "x.csv", "id", "error", "label")
  assert str(excinfo.value) == ("x.csv:5: id 'a' is listed again (first at line 2); remove one, or set "
                                "data.duplicates='warn' to keep the first")
  with pytest.raises(DataError) as excinfo:
    text_inputs.first_entries(entries[:2] + entries[3:], "x.csv", "id", "error", "label")
  assert str(excinfo.value).startswith("x.csv:7: id 'b' has label 'beagle' here but 'akita' at line 3; ")
  with caplog.at_level(logging.WARNING):
    assert text_inputs.first_entries(entries, "x.csv", "id", "warn", "label") == entries[:2]
  assert "x.csv:7: id 'b' has label 'beagle' here but 'akita' at line 3; keeping the first" in caplog.text


def test_check_overlap_refuses_or_warns(caplog):
  train = {"a": "train.txt:1", "b": "train.txt:2"}
  evaluation = {"c": "eval.txt:1", "b": "eval.txt:2", "a": "eval.txt:3"}
  with pytest.raises(DataError) as excinfo:
    text_inputs.check_overlap(train, evaluation, "image id", "error")
  assert str(excinfo.value) == ("eval.txt:2: image id 'b' is in the training split too (train.txt:2) "
                                "(1 more); remove it from one split, or set data.duplicates='warn' to keep "
                                "both")
  with caplog.at_level(logging.WARNING):
    text_inputs.check_overlap(train, evaluation, "image id", "warn")
  assert "kept in both splits" in caplog.text
  text_inputs.check_overlap(train, {"c": "eval.txt:1"}, "image id", "error")


def test_duplicates_mode_and_skip_report():
  with pytest.raises(ConfigError, match="^data.duplicates='ignore' is not one of error, warn$"):
    text_inputs.check_duplicates_mode("ignore")
  names = [f"f{i}" for i in range(150)]
  report = image_checks.skip_report({"train": names[:120], "eval": names[120:]})
  assert report["skipped_files"] == {"train": 120, "eval": 30}
  assert report["skipped_names"] == names[:100]
  assert image_checks.skip_report({"train": [], "eval": []}) == {"skipped_files": {"train": 0, "eval": 0},
                                                         "skipped_names": []}
