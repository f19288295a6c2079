""".npy arrays streamed from their file by fixed-length records: headers, reads, shuffled blocks, and
up-front scans for NaN, inf and labels out of range."""
import collections
import os
import sys

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract.errors import DataError

# Bytes of a memory-mapped array scanned per step of a NaN or label check.
_SCAN_CHUNK_BYTES = 64 << 20

# dtypes that tf.io.decode_raw reads, by their NumPy name.
_RAW_DTYPES = {
    "uint8": tf.uint8, "int8": tf.int8, "uint16": tf.uint16, "int16": tf.int16,
    "int32": tf.int32, "int64": tf.int64,
    "float16": tf.float16, "float32": tf.float32, "float64": tf.float64,
}


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


def read_npy_pair(first, second, start, stop, seed):
  """(record of first, record of second) for records start..stop-1 of two arrays of as many records:
  in order and once with seed None, else endless and shuffled with it (read_shuffled_blocks)."""

  def block(a, b):
    return tf.data.Dataset.zip((read_npy_records(first, a, b), read_npy_records(second, a, b)))

  if seed is None:
    return block(start, stop)
  return read_shuffled_blocks(stop - start, lambda a, b: block(start + a, start + b), seed=seed)


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


def check_npy_pixels(info, pixel_max):
  """Checks that an array of images holds finite values in [0, pixel_max] (data.npy_pixel_max); warns
  when pixel_max is 255 and float values lie in [0, 1]."""
  low, high = check_npy_finite(info)
  if low < 0 or high > pixel_max:
    raise DataError(f"{info.path}: values span [{low:g}, {high:g}], outside [0, data.npy_pixel_max="
                    f"{pixel_max:g}]; store pixels in [0, 255] or [0, 1] and set data.npy_pixel_max")
  if info.dtype != np.uint8 and pixel_max == 255 and high <= 1:
    logging.warning("%s: values lie in [0, 1]; if that is the pixel range set data.npy_pixel_max=1",
                    info.path)
