"""File listings -> tf.data pipelines: image checks, TFRecords and .npy arrays.

Everything here streams from files, so no dataset ever becomes a graph
constant and every iterator can be saved in a tf.train.Checkpoint (no
py_function, no from_generator).
"""
import collections
import concurrent.futures
import contextlib
import os
import shutil
import sys
import tempfile
import zlib

from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.errors import ConfigError
from common.errors import DataError

# Formats that both PIL and tf.io.decode_image read, so a file PIL accepts up
# front does not fail later inside the input pipeline.
TF_IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "GIF")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")

# Log progress of an up-front check only for lists at least this long.
_PROGRESS_MIN_ITEMS = 1000
_NUM_CHECK_THREADS = 8
# How many skipped names the summary line lists before "...".
_MAX_NAMES_LOGGED = 10
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


def pad_to_multiple(tensor, multiple, value=0, axis=0):
  """Pads axes `axis` and `axis + 1` (height, width) at the end to multiples of `multiple`."""
  shape = tf.shape(tensor)
  pad_h, pad_w = (-shape[axis]) % multiple, (-shape[axis + 1]) % multiple
  rank = tf.rank(tensor)
  paddings = tf.concat([tf.zeros([axis, 2], tf.int32), [[0, pad_h], [0, pad_w]],
                        tf.zeros([rank - axis - 2, 2], tf.int32)], axis=0)
  return tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))


# Listing and checking files.


def list_files(directory, extensions):
  """Sorted paths of the files directly in `directory` whose names end with one of `extensions`."""
  if not os.path.isdir(directory):
    raise DataError(f"{directory}: no such directory")
  suffixes = tuple(e.lower() for e in extensions)
  paths = sorted(
      os.path.join(directory, name) for name in os.listdir(directory)
      if name.lower().endswith(suffixes) and os.path.isfile(os.path.join(directory, name)))
  if not paths:
    raise DataError(f"{directory}: no files ending in {', '.join(suffixes)}")
  return paths


@contextlib.contextmanager
def decoded_image(path):
  """Opens and fully decodes an image with PIL; UndecodableFileError if it does not decode.

  PIL raises many types for broken files (OSError, SyntaxError, EOFError,
  zlib.error...), hence the broad excepts around opening and decoding only.
  """
  try:
    img = Image.open(path)
  except FileNotFoundError:
    raise DataError(f"{path}: no such file") from None
  except Exception as e:  # pylint: disable=broad-except
    raise UndecodableFileError(f"{path}: does not decode as an image ({e})") from None
  with img:
    try:
      img.load()
    except Exception as e:  # pylint: disable=broad-except
      raise UndecodableFileError(f"{path}: does not decode as an image ({e})") from None
    yield img


def check_image(path):
  """Decodes an image up front; returns its PIL format, mode and (width, height)."""
  with decoded_image(path) as img:
    image_format, mode, size = img.format, img.mode, img.size
  if image_format not in TF_IMAGE_FORMATS:
    raise UndecodableFileError(
        f"{path}: {image_format} images are not read by TensorFlow; use {', '.join(TF_IMAGE_FORMATS)}")
  return image_format, mode, size


def check_files(items, check_fn, skip_bad_files, name_fn=str):
  """Runs `check_fn(item)` over `items` in a thread pool, in order.

  Args:
    items: what to check (paths, or tuples of paths).
    check_fn: item -> info; raises DataError for a bad item, UndecodableFileError
      for one that does not decode.
    skip_bad_files: skip and count undecodable items instead of raising; other
      DataErrors (inconsistent files) always raise.
    name_fn: item -> the name that the skip summary lists.

  Returns:
    (good_items, infos, num_skipped), good_items and infos in the order of `items`.
  """
  items = list(items)
  good, infos, skipped = [], [], []
  log_every = max(len(items) // 10, 1) if len(items) >= _PROGRESS_MIN_ITEMS else 0

  def checked(item):
    try:
      return check_fn(item), None
    except UndecodableFileError as e:
      if not skip_bad_files:
        raise
      return None, e

  with concurrent.futures.ThreadPoolExecutor(_NUM_CHECK_THREADS) as pool:
    try:
      for i, (item, (info, error)) in enumerate(zip(items, pool.map(checked, items)), start=1):
        if error is None:
          good.append(item)
          infos.append(info)
        else:
          logging.warning("skipping: %s", error)
          skipped.append(name_fn(item))
        if log_every and i % log_every == 0:
          logging.info("checked %s of %s files", f"{i:,}", f"{len(items):,}")
    except DataError:
      pool.shutdown(wait=True, cancel_futures=True)
      raise
  _log_skipped(skipped, len(items))
  return good, infos, len(skipped)


def _log_skipped(skipped, total):
  if not skipped:
    return
  names = ", ".join(skipped[:_MAX_NAMES_LOGGED]) + (", ..." if len(skipped) > _MAX_NAMES_LOGGED else "")
  logging.warning("skipped %s of %s files that do not decode: %s", f"{len(skipped):,}", f"{total:,}", names)


def check_images(paths, skip_bad_files):
  """Decodes every image up front; returns (good_paths, num_skipped)."""
  good, _, num_skipped = check_files(paths, check_image, skip_bad_files)
  if not good:
    raise DataError(f"none of the {len(paths):,} images decode (first: {paths[0]})")
  return good, num_skipped


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


def read_tfrecords(pattern, shuffle_seed=None, repeat=False, cycle_length=4):
  """Serialized records of the files matching `pattern`.

  With a seed, the file order is shuffled (again on every pass when
  repeating) and files are interleaved; without one the order is the sorted
  file order, record by record.
  """
  paths = list_tfrecord_files(pattern)
  files = tf.data.Dataset.from_tensor_slices(paths)
  if shuffle_seed is not None:
    files = files.shuffle(len(paths), seed=shuffle_seed, reshuffle_each_iteration=True)
  if repeat:
    files = files.repeat()
  if shuffle_seed is None:
    return files.flat_map(tf.data.TFRecordDataset)
  return files.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(paths)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


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
