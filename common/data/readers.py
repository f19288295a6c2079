"""File listings -> tf.data pipelines: image checks, TFRecords and .npy arrays.

Everything here streams from files, so no dataset ever becomes a graph
constant and every iterator can be saved in a tf.train.Checkpoint (no
py_function, no from_generator).
"""
import collections
import concurrent.futures
import contextlib
import csv
import hashlib
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
import zlib

from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError

# Formats that both PIL and tf.io.decode_image read, so a file PIL accepts up
# front does not fail later inside the input pipeline.
TF_IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "GIF")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")

# Log progress of an up-front check only for lists at least this long.
_PROGRESS_MIN_ITEMS = 1000
_NUM_CHECK_THREADS = 8
# Items handed to the thread pool (or records batched by a TFRecord check) at a time, so that
# TFRecord files are never read whole.
_CHECK_CHUNK = 256
_EXIF_ORIENTATION = 0x0112  # the EXIF tag
# How many skipped names the summary line lists before "...", and the data report keeps.
_MAX_NAMES_LOGGED = 10
_MAX_NAMES_REPORTED = 100
# data.duplicates: an id listed twice (or in train and eval) is an error, or a warning.
DUPLICATE_MODES = ("error", "warn")
# Bytes of a memory-mapped array scanned per step of a NaN or label check.
_SCAN_CHUNK_BYTES = 64 << 20

# dtypes that tf.io.decode_raw reads, by their NumPy name.
_RAW_DTYPES = {
    "uint8": tf.uint8, "int8": tf.int8, "uint16": tf.uint16, "int16": tf.int16,
    "int32": tf.int32, "int64": tf.int64,
    "float16": tf.float16, "float32": tf.float32, "float64": tf.float64,
}


class UndecodableFileError(DataError):
  """A file that does not decode; `skip_bad_files` may skip it."""


# What the trainers' data sources share.


def required(data_cfg, key):
  """data_cfg[key], which the configured data.source needs; a ConfigError when it is empty."""
  if not data_cfg[key]:
    raise ConfigError(f"data.{key} must be set for data.source='{data_cfg.source}'")
  return data_cfg[key]


def synthetic_cache_dir(data_cfg, workdir):
  """Where synthetic data is written: data.cache_dir, else <workdir>/data."""
  cache_dir = data_cfg.cache_dir or (os.path.join(workdir, "data") if workdir else None)
  if not cache_dir:
    raise ConfigError("data.cache_dir (or a workdir) is needed to write the synthetic data")
  return cache_dir


def write_once(cache_dir, name, write_fn):
  """cache_dir/name, written by write_fn(folder) the first time only; returns its path.

  The set is written to a temporary folder and renamed, so an interrupted run
  leaves no half set; the name should hold every parameter of the set.
  """
  root = os.path.join(cache_dir, name)
  if not os.path.isdir(root):
    os.makedirs(cache_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir)
    write_fn(staging)
    try:
      os.rename(staging, root)
    except OSError:  # another process wrote the same set first
      shutil.rmtree(staging)
    logging.info("wrote %s", root)
  return root


def split_by_hash(examples, eval_fraction, path_fn, group_fn=None):
  """(train, eval): in each group, the examples whose file names hash lowest go to eval.

  The split depends on file names only, not on the seed or the other files,
  so runs with different seeds are evaluated on the same images. Each group
  (a class, say; one group if group_fn is None) of two or more examples gives
  at least one to eval and keeps at least one for training.
  """
  groups = collections.defaultdict(list)
  for example in examples:
    groups[group_fn(example) if group_fn else None].append(example)
  eval_set = set()
  for members in groups.values():
    if len(members) < 2:
      continue
    num_eval = min(max(int(round(len(members) * eval_fraction)), 1), len(members) - 1)
    ranked = sorted(members, key=lambda e: zlib.crc32(os.path.basename(path_fn(e)).encode()))
    eval_set.update(ranked[:num_eval])
  return [e for e in examples if e not in eval_set], [e for e in examples if e in eval_set]


def files_fingerprint(paths):
  """'<n> files, <digest>' of an ordered list of files, for a checkpoint's input fingerprint.

  Adding, removing or renaming a file changes it; rewriting one, or moving the
  whole folder, does not (names count relative to the files' common folder).
  """
  root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0]) if paths else ""
  names = [os.path.relpath(path, root) for path in paths]
  digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]
  return f"{len(paths)} files, {digest}"


def pad_to_multiple(tensor, multiple, value=0, axis=0):
  """Pads axes `axis` and `axis + 1` (height, width) at the end to multiples of `multiple`."""
  shape = tf.shape(tensor)
  pad_h, pad_w = (-shape[axis]) % multiple, (-shape[axis + 1]) % multiple
  rank = tf.rank(tensor)
  paddings = tf.concat([tf.zeros([axis, 2], tf.int32), [[0, pad_h], [0, pad_w]],
                        tf.zeros([rank - axis - 2, 2], tf.int32)], axis=0)
  return tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))


# Text inputs: one reader for split files, CSVs, labels and pairs files.


def read_text(path, what):
  """The contents of a UTF-8 text file (a BOM is dropped); a DataError names a missing
  file, a folder, or the first byte that is not UTF-8."""
  contents = read_file(path, what)
  try:
    return contents.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = contents.count(b"\n", 0, e.start) + 1
    raise DataError(f"{path}: not UTF-8 text (byte 0x{contents[e.start]:02x} at line {line}); "
                    "save it as UTF-8") from None


def read_text_lines(path, what):
  """[(line number, line)] of the non-blank lines of a UTF-8 text file, line ends stripped.

  Lines are split at \\n only (not at the other breaks str.splitlines knows), so
  that the numbers are those an editor shows.
  """
  lines = [(n, line.rstrip("\r")) for n, line in enumerate(read_text(path, what).split("\n"), start=1)]
  return [(n, line) for n, line in lines if line.strip()]


def read_csv_rows(path, what):
  """[(line number, fields)] of the non-empty rows of a UTF-8 CSV file, fields stripped."""
  reader = csv.reader(io.StringIO(read_text(path, what), newline=""))
  return [(reader.line_num, [field.strip() for field in row]) for row in reader if any(row)]


def duplicates_mode(data_cfg):
  """data.duplicates, checked."""
  mode = data_cfg.duplicates
  if mode not in DUPLICATE_MODES:
    raise ConfigError(f"data.duplicates='{mode}' is not one of {', '.join(DUPLICATE_MODES)}")
  return mode


def first_entries(entries, path, what, duplicates, value_name=None):
  """The entries (key, value, line number) of a file whose key comes first.

  A key listed again (with the same value, or with another: a conflict) is a
  DataError naming both lines, or with duplicates="warn" a warning; the first
  entry is kept either way.
  """
  first, kept = {}, []
  for key, value, line in entries:
    if key not in first:
      first[key] = (value, line)
      kept.append((key, value, line))
      continue
    first_value, first_line = first[key]
    if value == first_value:
      message = f"{path}:{line}: {what} '{key}' is listed again (first at line {first_line})"
    else:
      message = (f"{path}:{line}: {what} '{key}' has {value_name} '{value}' here but '{first_value}' "
                 f"at line {first_line}")
    _report_duplicate(message, duplicates, "remove one, or set data.duplicates='warn' to keep the first",
                      "keeping the first")
  return kept


def check_overlap(train, evaluation, what, duplicates):
  """Reports keys both in `train` and `evaluation` ({key: where}, where = "path:line" or a path).

  An example in both splits makes the evaluation measure training images: a
  DataError naming the first, or with duplicates="warn" a warning (both kept).
  """
  both = [key for key in evaluation if key in train]
  if both:
    others = f" ({len(both) - 1} more)" if len(both) > 1 else ""
    message = (f"{evaluation[both[0]]}: {what} '{both[0]}' is in the training split too "
               f"({train[both[0]]}){others}")
    _report_duplicate(message, duplicates,
                      "remove it from one split, or set data.duplicates='warn' to keep both",
                      "kept in both splits")


def _report_duplicate(message, duplicates, fix, kept):
  if duplicates == "error":
    raise DataError(f"{message}; {fix}")
  logging.warning("%s; %s", message, kept)


# Listing and checking files.


def file_names(directory):
  """Sorted names of the files directly in `directory`, hidden ones left out.

  A symbolic link whose target is gone counts as a file, so that the checks
  name it (read_file) rather than the listing drop it silently.
  """
  return sorted(name for name in os.listdir(directory) if not name.startswith(".") and (
      os.path.isfile(os.path.join(directory, name)) or not os.path.exists(os.path.join(directory, name))))


def list_files(directory, extensions):
  """Sorted paths of the files directly in `directory` whose names end with one of `extensions`."""
  if not os.path.isdir(directory):
    raise DataError(f"{directory}: no such directory")
  suffixes = tuple(e.lower() for e in extensions)
  files = file_names(directory)
  paths = [os.path.join(directory, name) for name in files if name.lower().endswith(suffixes)]
  if not paths:
    raise DataError(f"{directory}: no files ending in {', '.join(suffixes)}")
  others = [name for name in files if not name.lower().endswith(suffixes)]
  if others:  # not silently: a photo saved as .webp, say, would be missed
    logging.warning("%s: left out %d files not ending in %s, e.g. %s", directory, len(others),
                    ", ".join(suffixes), others[0])
  return paths


def read_file(path, what="file"):
  """The bytes of a file; a DataError names a missing file, a folder or an unreadable file, an
  UndecodableFileError (which data.skip_bad_files skips) a symbolic link to nothing."""
  try:
    with open(path, "rb") as f:
      return f.read()
  except FileNotFoundError:
    if os.path.islink(path):
      raise UndecodableFileError(f"{path}: a symbolic link to {os.readlink(path)}, which does not "
                                 "exist") from None
    raise DataError(f"{path}: no such {what}") from None
  except IsADirectoryError:
    raise DataError(f"{path}: a folder, expected a {what}") from None
  except OSError as e:
    raise DataError(f"{path}: cannot read the {what} ({e.strerror})") from None


@contextlib.contextmanager
def decoded_image(path, contents=None):
  """Opens and fully decodes an image with PIL; UndecodableFileError if it does not decode.

  PIL raises many types for broken files (OSError, SyntaxError, EOFError,
  zlib.error...), hence the broad excepts around opening and decoding only.
  """
  with _opened_image(path, contents) as img:
    try:
      img.load()
    except Exception as e:  # pylint: disable=broad-except
      raise UndecodableFileError(f"{path}: does not decode as an image ({_one_line(e)})") from None
    yield img


@contextlib.contextmanager
def _opened_image(path, contents=None):
  """A PIL image of the file (its header read, its pixels not decoded)."""
  contents = read_file(path) if contents is None else contents
  try:
    img = Image.open(io.BytesIO(contents))
  except Image.UnidentifiedImageError:
    raise UndecodableFileError(f"{path}: does not decode as an image (not an image, or its header "
                               "is corrupt)") from None
  except Exception as e:  # pylint: disable=broad-except
    raise UndecodableFileError(f"{path}: does not decode as an image ({_one_line(e)})") from None
  with img:
    yield img


def _one_line(error):
  return " ".join(str(error).split()) or type(error).__name__


def tf_decoded(path, decode_fn, *args, **kwargs):
  """decode_fn(*args, **kwargs); run eagerly, a TensorFlow error is an UndecodableFileError naming path.

  PIL reads files that TensorFlow's decoders refuse (a PNG missing its last
  bytes or with a bad IDAT checksum, a GIF missing its last block, a 1-bit
  BMP), so the check decodes with the pipeline's own op: it then fails on
  exactly the files the pipeline would fail on.
  """
  try:
    return decode_fn(*args, **kwargs)
  except tf.errors.OpError as e:  # the op reads nothing but these bytes, so they are at fault
    raise UndecodableFileError(f"{path}: does not decode as an image (TensorFlow: {tf_reason(e)})") from None


def tf_reason(error):
  """The first line of a TensorFlow error, without the function and op names around it."""
  lines = str(error.message).strip().splitlines() or [type(error).__name__]
  reason = re.sub(r"^\{\{[^}]*\}\}\s*", "", lines[0])
  return re.sub(r"\s*\[Op:\w+\].*$", "", reason)


def check_image(path):
  """Decodes an image up front as the pipelines do; returns its PIL format, mode and (width, height).

  PIL reads the header (format, size; a clear line for formats TensorFlow does
  not read), TensorFlow decodes the pixels (see tf_decoded).
  """
  contents = read_file(path)
  with _opened_image(path, contents) as img:
    image_format, mode, size = img.format, img.mode, img.size
  if image_format not in TF_IMAGE_FORMATS:
    raise UndecodableFileError(
        f"{path}: {image_format} images are not read by TensorFlow; use {', '.join(TF_IMAGE_FORMATS)}")
  tf_decoded(path, decode_image, contents)
  return image_format, mode, size


def exif_orientation(path):
  """The EXIF orientation of a JPEG file (1: shown as stored; 2-8: shown turned or mirrored), which
  TensorFlow's decoders ignore; 1 for other formats."""
  with _opened_image(path) as img:
    return int(img.getexif().get(_EXIF_ORIENTATION, 1)) if img.format == "JPEG" else 1


def check_files(items, check_fn, skip_bad_files, name_fn=str, what="files"):
  """Runs `check_fn(item)` over `items` in a thread pool, in order.

  Args:
    items: what to check (paths, or tuples of paths).
    check_fn: item -> info; raises DataError for a bad item, UndecodableFileError
      for one that does not decode.
    skip_bad_files: skip, name and count undecodable items instead of raising;
      other DataErrors (inconsistent files) always raise.
    name_fn: item -> the name that the skip lines and the data report list.
    what: what the items are, for the log lines.

  Returns:
    (good_items, infos, skipped names), good_items and infos in the order of `items`.
  """
  items = list(items)
  good, infos, skipped = [], [], []
  for item, info, error in _checked_stream(items, check_fn, skip_bad_files, what, len(items)):
    if error is None:
      good.append(item)
      infos.append(info)
    else:
      skipped.append(name_fn(item))
  _log_skipped(skipped, len(items), what)
  return good, infos, skipped


def _checked_stream(items, check_fn, skip_bad_files, what, total=None):
  """Yields (item, info, None) or (item, None, error) of every item, in order.

  The items are handed to the thread pool a chunk at a time, so that an
  iterator (the records of TFRecord files) is never read whole.
  """
  if total is None:
    log_every = 10 * _PROGRESS_MIN_ITEMS
  else:
    log_every = max(total // 10, 1) if total >= _PROGRESS_MIN_ITEMS else 0

  def checked(item):
    try:
      return check_fn(item), None
    except UndecodableFileError as e:
      if not skip_bad_files:
        raise UndecodableFileError(f"{e}; data.skip_bad_files=True skips such {what}") from None
      return None, e

  items = iter(items)
  count = 0
  with concurrent.futures.ThreadPoolExecutor(_NUM_CHECK_THREADS) as pool:
    try:
      for chunk in iter(lambda: list(itertools.islice(items, _CHECK_CHUNK)), []):
        for item, (info, error) in zip(chunk, pool.map(checked, chunk)):
          if error is not None:
            logging.warning("skipping: %s", error)
          yield item, info, error
          count += 1
          if log_every and count % log_every == 0:
            logging.info("checked %s%s %s", f"{count:,}", f" of {total:,}" if total else "", what)
    except DataError:
      pool.shutdown(wait=True, cancel_futures=True)
      raise


def _log_skipped(skipped, total, what):
  if not skipped:
    return
  names = ", ".join(skipped[:_MAX_NAMES_LOGGED]) + (", ..." if len(skipped) > _MAX_NAMES_LOGGED else "")
  logging.warning("skipped %s of %s %s that do not decode: %s", f"{len(skipped):,}", f"{total:,}", what,
                  names)


def check_images(paths, skip_bad_files):
  """Decodes every image up front; returns (good_paths, skipped names)."""
  good, _, skipped = check_files(paths, check_image, skip_bad_files)
  if not good:
    raise DataError(f"none of the {len(paths):,} images decode (first: {paths[0]})")
  return good, skipped


def skip_report(skipped):
  """The data report of what the checks skipped: {split: [names]} ->
  {"skipped_files": {split: count}, "skipped_names": the first names}."""
  names = [name for split_names in skipped.values() for name in split_names]
  return {"skipped_files": {split: len(split_names) for split, split_names in skipped.items()},
          "skipped_names": names[:_MAX_NAMES_REPORTED]}


def decode_image(contents, channels=3):
  """Encoded JPEG/PNG/BMP/GIF bytes -> uint8 [height, width, channels] (first frame of a GIF)."""
  image = tf.io.decode_image(contents, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  return image


# TFRecords.


def bytes_feature(values):
  values = values if isinstance(values, (list, tuple)) else [values]
  values = [v.encode() if isinstance(v, str) else v for v in values]
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def int64_feature(values):
  values = values if isinstance(values, (list, tuple)) else [values]
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def make_example(features):
  """{key: tf.train.Feature} -> a serialized tf.train.Example."""
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def shard_paths(path_prefix, num_shards):
  return [f"{path_prefix}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def write_tfrecord_shards(records, path_prefix, num_shards, log_every=1000):
  """Writes serialized records round-robin into `num_shards` files; returns their paths.

  Shards are named {path_prefix}-00000-of-00004.tfrecord and so on, so the
  pattern {path_prefix}-*.tfrecord reads them back.
  """
  if num_shards < 1:
    raise ValueError(f"num_shards must be >= 1, got {num_shards}")
  paths = shard_paths(path_prefix, num_shards)
  os.makedirs(os.path.dirname(os.path.abspath(path_prefix)), exist_ok=True)
  writers = [tf.io.TFRecordWriter(p) for p in paths]
  count = 0
  try:
    for count, record in enumerate(records, start=1):
      writers[(count - 1) % num_shards].write(record)
      if log_every and count % log_every == 0:
        logging.info("wrote %s records", f"{count:,}")
  finally:
    for writer in writers:
      writer.close()
  logging.info("wrote %s records to %s", f"{count:,}", f"{path_prefix}-*-of-{num_shards:05d}.tfrecord")
  return paths


def list_tfrecord_files(pattern):
  """Sorted files matching a glob pattern; DataError when none match."""
  paths = sorted(tf.io.gfile.glob(pattern))
  if not paths:
    raise DataError(f"no files match {pattern}")
  return paths


def read_tfrecords(pattern, shuffle_seed=None, repeat=False, cycle_length=4, skip=()):
  """Serialized records of the files matching `pattern`, without the records `skip` names.

  With a seed, the file order is shuffled (again on every pass when
  repeating) and files are interleaved; without one the order is the sorted
  file order, record by record. `skip` lists (path, record index) pairs: the
  records that check_tfrecords skipped.
  """
  paths = list_tfrecord_files(pattern)
  read_file_records = _records_without(skip) if skip else tf.data.TFRecordDataset
  files = tf.data.Dataset.from_tensor_slices(paths)
  if shuffle_seed is not None:
    files = files.shuffle(len(paths), seed=shuffle_seed, reshuffle_each_iteration=True)
  if repeat:
    files = files.repeat()
  if shuffle_seed is None:
    return files.flat_map(read_file_records)
  return files.interleave(read_file_records, cycle_length=min(cycle_length, len(paths)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _records_without(skip):
  """path -> the records of that file, less those whose "path#index" key is in `skip`."""
  keys = tf.constant([f"{path}#{index}" for path, index in skip])

  def read(path):
    def keep(index, _):
      key = tf.strings.join([path, "#", tf.strings.as_string(index)])
      return tf.logical_not(tf.reduce_any(tf.equal(key, keys)))

    return tf.data.TFRecordDataset(path).enumerate().filter(keep).map(lambda _, record: record)

  return read


def check_tfrecords(pattern, record_fn, check_fn, skip_bad_files):
  """Parses and decodes every record of the matching files once, as the pipelines do; returns what
  check_fn makes of each.

  record_fn(serialized record) -> fixed-shape tensors, built with parse_example
  and tf_decoded so that it runs both in tf.data and eagerly; check_fn(its
  NumPy values) -> info, or a DataError for bad values. Each file is read in
  one parallel tf.data pass (4-8x faster than an eager call per record);
  a file whose pass fails is checked again record by record, eagerly, in the
  thread pool, so that the first bad record is named by file and index (or,
  with skip_bad_files, every undecodable one is skipped: pass the returned
  skip list to read_tfrecords). A file that is not a readable TFRecord file is
  always a DataError.

  Returns:
    (infos of the good records in file order, skipped [(path, record index)]).
  """
  infos, skipped, count = [], [], 0
  paths = list_tfrecord_files(pattern)
  log_every = max(len(paths) // 10, 1) if len(paths) >= 10 else 0
  for file_number, path in enumerate(paths, start=1):
    if log_every and file_number % log_every == 0:
      logging.info("checked %s records of %d of %d files", f"{count:,}", file_number - 1, len(paths))
    try:
      file_infos = _check_tfrecord_file_fast(path, record_fn, check_fn)
      file_skipped = []
    except tf.errors.OpError:
      file_infos, file_skipped = _check_tfrecord_file_by_record(path, record_fn, check_fn, skip_bad_files)
    infos += file_infos
    skipped += file_skipped
    count += len(file_infos) + len(file_skipped)
  _log_skipped(tfrecord_names(skipped), count, "records")
  if not count:
    raise DataError(f"{pattern}: the files hold no records")
  if not infos:
    raise DataError(f"none of the {count:,} records of {pattern} decode")
  return infos, skipped


def _check_tfrecord_file_fast(path, record_fn, check_fn):
  """check_fn's infos of every record of a file, from one parallel tf.data pass (an OpError if one fails)."""
  infos = []
  records = tf.data.TFRecordDataset(path).map(record_fn, num_parallel_calls=tf.data.AUTOTUNE,
                                                deterministic=True)
  for batch in records.batch(_CHECK_CHUNK).as_numpy_iterator():
    for values in zip(*tf.nest.flatten(batch)):
      infos.append(_checked_record(path, len(infos), check_fn, values))
  return infos


def _check_tfrecord_file_by_record(path, record_fn, check_fn, skip_bad_files):
  """(infos, skipped) of a file, a record at a time, eagerly, in the thread pool."""

  def records():
    index = 0
    try:
      for index, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        yield index, record
    except tf.errors.OpError as e:
      raise DataError(f"{path}: not a readable TFRecord file (at record {index}: {tf_reason(e)})") from None

  def check(item):
    index, record = item
    try:
      values = [t.numpy() for t in tf.nest.flatten(record_fn(record))]
    except DataError as e:
      raise type(e)(f"{path}: record {index}: {e}") from None
    return _checked_record(path, index, check_fn, values)

  infos, skipped = [], []
  for (index, _), info, error in _checked_stream(records(), check, skip_bad_files, "records"):
    if error is None:
      infos.append(info)
    else:
      skipped.append((path, index))
  return infos, skipped


def _checked_record(path, index, check_fn, values):
  try:
    return check_fn(*values)
  except DataError as e:
    raise type(e)(f"{path}: record {index}: {e}") from None


def parse_example(record, features):
  """tf.io.parse_single_example(record, features), as a pipeline parses it; run eagerly, an
  UndecodableFileError when the record is not such an example."""
  try:
    return tf.io.parse_single_example(record, features)
  except tf.errors.OpError as e:
    raise UndecodableFileError(
        f"not a tf.train.Example with {', '.join(features)} ({tf_reason(e)})") from None


def tfrecord_names(skipped):
  """Names of skipped records, for the log and the data report."""
  return [f"{path} record {index}" for path, index in skipped]


# .npy arrays, streamed from the file by fixed-length records.

NpyInfo = collections.namedtuple("NpyInfo", ["path", "shape", "dtype", "offset"])


def read_npy_header(path):
  """Reads a .npy header; returns NpyInfo(path, shape, dtype, offset of the data)."""
  try:
    with open(path, "rb") as f:
      version = np.lib.format.read_magic(f)
      if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
      elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
      else:
        raise DataError(f"{path}: .npy format version {version} is not supported")
      offset = f.tell()
  except FileNotFoundError:
    raise DataError(f"{path}: no such file") from None
  except ValueError as e:
    raise DataError(f"{path}: not a .npy file ({e})") from None
  info = NpyInfo(str(path), tuple(shape), dtype, offset)
  _check_npy_layout(info, fortran_order)
  return info


def _check_npy_layout(info, fortran_order):
  path, shape, dtype = info.path, info.shape, info.dtype
  if dtype.hasobject or dtype.fields is not None:
    raise DataError(f"{path}: dtype {dtype} cannot be streamed; save a plain numeric array")
  if dtype.name not in _RAW_DTYPES:
    raise DataError(f"{path}: dtype {dtype.name} is not supported; use one of {', '.join(_RAW_DTYPES)}")
  if fortran_order:
    raise DataError(f"{path}: array is in Fortran order; save np.ascontiguousarray(array) instead")
  if len(shape) < 1 or shape[0] == 0 or record_bytes(info) == 0:
    raise DataError(f"{path}: array of shape {shape} has no records")
  expected = info.offset + shape[0] * record_bytes(info)
  actual = os.path.getsize(path)
  if actual != expected:
    raise DataError(f"{path}: file is {actual:,} bytes, its header says {expected:,} (truncated?)")


def record_bytes(info):
  """Bytes of one record (one index along the first axis)."""
  return int(np.prod(info.shape[1:], dtype=np.int64)) * info.dtype.itemsize


def _is_little_endian(dtype):
  if dtype.byteorder == "=":
    return sys.byteorder == "little"
  return dtype.byteorder != ">"


def read_npy_records(info, start=0, stop=None):
  """Records start..stop-1 of a .npy array as a dataset of tensors of shape info.shape[1:].

  `start` and `stop` may be scalar tensors, so that this can run inside
  `interleave`. The array stays in the file: only its path and offsets are in
  the graph.
  """
  num_records = info.shape[0]
  stop = num_records if stop is None else stop
  size = record_bytes(info)
  start = tf.cast(start, tf.int64)
  stop = tf.cast(stop, tf.int64)
  records = tf.data.FixedLengthRecordDataset(
      info.path, size, header_bytes=info.offset + start * size, footer_bytes=(num_records - stop) * size)
  out_type = _RAW_DTYPES[info.dtype.name]
  little_endian = _is_little_endian(info.dtype)
  record_shape = list(info.shape[1:])
  return records.map(
      lambda r: tf.reshape(tf.io.decode_raw(r, out_type, little_endian=little_endian), record_shape))


def read_shuffled_blocks(num_records, make_block, seed, block_records=256, cycle_length=16):
  """An endless, seeded, near-global shuffle of a long record file that is read sequentially.

  The records are cut into blocks of `block_records`; the block order is
  shuffled on every pass and `cycle_length` blocks are read interleaved, record
  by record. Follow with a `shuffle` to mix further.

  Args:
    num_records: records in the file(s).
    make_block: (start, stop) scalar int64 tensors -> dataset of those records.
    seed: shuffle seed.
    block_records: records per block.
    cycle_length: blocks read at the same time.
  """
  num_blocks = -(-num_records // block_records)

  def block(index):
    start = index * block_records
    return make_block(start, tf.minimum(start + block_records, num_records))

  blocks = tf.data.Dataset.range(num_blocks).shuffle(num_blocks, seed=seed, reshuffle_each_iteration=True)
  return blocks.repeat().interleave(block, cycle_length=min(cycle_length, num_blocks), block_length=1,
                                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _scan_chunks(info):
  """Yields (first index, chunk) over a memory-mapped array, about _SCAN_CHUNK_BYTES at a time."""
  array = np.load(info.path, mmap_mode="r")
  step = max(_SCAN_CHUNK_BYTES // record_bytes(info), 1)
  for start in range(0, info.shape[0], step):
    yield start, np.asarray(array[start:start + step])


def check_npy_finite(info):
  """Checks a float array for NaN and inf; returns its (min, max).

  Raises DataError naming the first bad index. Integer arrays are not
  scanned for finiteness but their range is still returned.
  """
  low, high = np.inf, -np.inf
  is_float = np.issubdtype(info.dtype, np.floating)
  for start, chunk in _scan_chunks(info):
    if is_float:
      finite = np.isfinite(chunk.reshape(len(chunk), -1)).all(axis=1)
      if not finite.all():
        bad = int(np.argmin(finite))
        what = "NaN" if np.isnan(chunk[bad]).any() else "inf"
        raise DataError(f"{info.path}: index {start + bad} contains {what}")
    low, high = min(low, chunk.min()), max(high, chunk.max())
  return float(low), float(high)


def check_npy_labels(info, num_classes, ignore_label=None):
  """Checks that an integer label array holds only 0..num_classes-1 (or the ignore label)."""
  if not np.issubdtype(info.dtype, np.integer):
    raise DataError(f"{info.path}: labels must be integers, got dtype {info.dtype.name}")
  for start, chunk in _scan_chunks(info):
    bad = (chunk < 0) | (chunk >= num_classes)
    if ignore_label is not None:
      bad &= chunk != ignore_label
    bad_rows = bad.reshape(len(chunk), -1).any(axis=1)
    if bad_rows.any():
      row = int(np.argmax(bad_rows))
      value = chunk[row][bad[row]].flat[0]
      allowed = f"0..{num_classes - 1}" + (f" or {ignore_label}" if ignore_label is not None else "")
      raise DataError(f"{info.path}: index {start + row} has label {value}, expected {allowed}")
