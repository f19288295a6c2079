"""TFRecord shards: writing them, reading them (shuffled or in order, less skipped records), and
checking every record up front as the pipelines parse it."""
import contextlib
import errno
import io
import os

from absl import logging
import tensorflow as tf

from common.contract.errors import DataError
from common.data import image_checks
from common.data.listing import UndecodableFileError


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
  pattern {path_prefix}-*.tfrecord reads them back. They are written under
  temporary names (<shard>.tmp) and renamed once all are whole: an error or a
  signal raised while writing (or by `records`) leaves none of them.
  """
  if num_shards < 1:
    raise ValueError(f"num_shards must be >= 1, got {num_shards}")
  paths = shard_paths(path_prefix, num_shards)
  os.makedirs(os.path.dirname(os.path.abspath(path_prefix)), exist_ok=True)
  for path in paths:  # before anything is written: a rename onto it would fail after the first shards
    if os.path.isdir(path):
      raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
  temporary = [f"{p}.tmp" for p in paths]
  writers, renamed = [], []
  count = 0
  try:
    writers += [tf.io.TFRecordWriter(p) for p in temporary]
    for count, record in enumerate(records, start=1):
      writers[(count - 1) % num_shards].write(record)
      if log_every and count % log_every == 0:
        logging.info("wrote %s records", f"{count:,}")
    for writer in writers:
      writer.close()  # flushes: a full disk fails here, before any rename
    for tmp, path in zip(temporary, paths):
      os.replace(tmp, path)
      renamed.append(path)
  except BaseException:
    for writer in writers:
      with contextlib.suppress(Exception):
        writer.close()
    for leftover in temporary + renamed:
      with contextlib.suppress(OSError):
        os.remove(leftover)
    raise
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
  image_checks.log_skipped(tfrecord_names(skipped), count, "records")
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
  for batch in records.batch(image_checks.CHECK_CHUNK).as_numpy_iterator():
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
      raise DataError(f"{path}: not a readable TFRecord file (at record {index}: "
                      f"{image_checks.tf_reason(e)})") from None

  def check(item):
    index, record = item
    try:
      values = [t.numpy() for t in tf.nest.flatten(record_fn(record))]
    except DataError as e:
      raise type(e)(f"{path}: record {index}: {e}") from None
    return _checked_record(path, index, check_fn, values)

  infos, skipped = [], []
  for (index, _), info, error in image_checks.checked_stream(records(), check, skip_bad_files, "records"):
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
        f"not a tf.train.Example with {', '.join(features)} ({image_checks.tf_reason(e)})") from None


def tfrecord_names(skipped):
  """Names of skipped records, for the log and the data report."""
  return [f"{path} record {index}" for path, index in skipped]


def check_image_sizes(pattern, image_key, max_pixels, tiles_key=None):
  """Refuses a record whose image (the bytes under image_key) is over max_pixels by its header,
  before the up-front check decodes it (image_checks.check_eval_size, which names tiles_key);
  records that do not parse are left to that check to name."""
  encoded = {image_key: tf.io.FixedLenFeature([], tf.string)}
  for path in list_tfrecord_files(pattern):
    records = (tf.data.TFRecordDataset(path).enumerate()
               .map(lambda index, record: (index, tf.io.parse_single_example(record, encoded)))
               .ignore_errors())
    for index, features in records.as_numpy_iterator():
      where = f"{path}: record {index}"
      size = image_checks.header_size(where, io.BytesIO(features[image_key]))
      if size:
        image_checks.check_eval_size(where, size, max_pixels, tiles_key=tiles_key)
