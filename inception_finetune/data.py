"""Classification inputs: synthetic classes, class folders, an id,label CSV and TF-Slim TFRecords.

Every source becomes the same two pipelines:
  train: endless, shuffled with the seed, optionally oversampling rare classes,
    Inception training distortions seeded per element; yields
    (float32 images [B, S, S, 3] in [-1, 1], int32 class ids [B]).
  eval: one pass in order, slim's evaluation preprocessing; same element types.
  raw_eval: the same pass of uint8 images as decoded, for a SavedModel that
    preprocesses inside.

Labels and images are checked before training starts, every image (and every
TFRecord) decoded once with TensorFlow's decoder: a label outside
0..num_classes-1, one-hot labels, an id listed twice, an unreadable or
undecodable image is a DataError naming the file (or shard and record);
data.skip_bad_files skips undecodable ones instead, naming and counting them in
the data report. Class ids map to names through a labels file in TF-Slim's
format (`<id>:<name>` per line), written to the workdir with config.json.

This module is the one reader of the config's data section: it checks its values and hands
plain values to the readers and checks of common/data (labels: common/data/class_labels).
"""
import collections
import dataclasses
import operator
import os
from typing import Callable

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import class_labels
from common.data import image_checks
from common.data import listing
from common.data import pipeline
from common.data import sources
from common.data import text_inputs
from common.data import tfrecords
from inception_finetune import preprocessing

SOURCES = ("synthetic", "folder", "csv", "tfrecord")
LABELS_FILENAME = "labels.txt"
CLASS_BALANCE_FILENAME = "class_balance.csv"

# TF-Slim's keys (datasets/dataset_utils.image_to_tfexample).
TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string, default_value="jpeg"),
    "image/class/label": tf.io.VarLenFeature(tf.int64),
}
# An example of an image file is (path, class id); the eval split is per class.
_PATH_AND_CLASS = (operator.itemgetter(0), operator.itemgetter(1))


@dataclasses.dataclass(frozen=True)
class ClassificationData:
  """What the trainer needs from the data.

  Attributes:
    train: endless dataset of (float32 [B, S, S, 3] in [-1, 1], int32 [B]); None for an evaluation.
    eval: one pass of (float32 images [B, S, S, 3], int32 [B]).
    raw_eval: one pass of (uint8 images [1, H, W, 3] as decoded, int32 [1]), in eval's order.
    num_classes: number of classes; ids are 0..num_classes-1.
    class_names: a name per class id.
    train_counts: training images per class (int64 [num_classes]); for an evaluation, the run's
      (its class_balance.csv), or None.
    num_eval: images in one pass of `eval`.
    new_train: () -> a new pipeline equal to `train`, from its first batch (a second iterator of
      `train` itself would draw another shuffle).
    data_report: what the checks skipped (common/data/image_checks.skip_report), for metrics.json.
    train_files: the training images, or TFRecord shards, in order.
    run_files: {name: text} of labels.txt and class_balance.csv, which the loop writes into the
      workdir with config.json, once the run's checks pass.
  """
  train: tf.data.Dataset
  eval: tf.data.Dataset
  raw_eval: tf.data.Dataset
  num_classes: int
  class_names: tuple
  train_counts: np.ndarray
  num_eval: int
  new_train: Callable[[], tf.data.Dataset]
  data_report: dict = dataclasses.field(default_factory=dict)
  train_files: list = dataclasses.field(default_factory=list)
  run_files: dict = dataclasses.field(default_factory=dict)


# A source in a uniform shape: read(seed) -> dataset of (encoded image bytes, int32 label),
# shuffled and endless with a seed, in order and once with None; counts per class of the
# images used; the names of those the check skipped.
_Source = collections.namedtuple("_Source", ["read", "counts", "skipped", "files"])


def make_datasets(data_cfg, batch_size, seed, workdir=None, for_training=True):
  """Builds the train and eval pipelines of the configured source, checking its files once.

  Args:
    data_cfg: the config's `data` section (configs/inception_v4.py).
    batch_size: training images per batch.
    seed: seeds synthetic images, shuffles, oversampling and distortions.
    workdir: where synthetic images go.
    for_training: False for an evaluation of the run in workdir (_evaluation_data).
  """
  _check_config(data_cfg)
  if not for_training:
    return _evaluation_data(data_cfg, batch_size, seed, workdir)
  class_names, train_source, eval_source = _make_sources(data_cfg, seed, workdir)
  num_classes = len(class_names)
  report = class_labels.class_balance_report(train_source.counts, class_names, data_cfg.min_class_count)
  for line in report.splitlines():
    logging.info("%s", line)
  train = _make_train(train_source, data_cfg, batch_size, seed)
  if data_cfg.oversample_to:
    logging.info("oversampling: classes drawn as though each had at least %d images",
                 data_cfg.oversample_to)
  logging.info("classification data: %s, %d train and %d eval images, %d classes", data_cfg.source,
               train_source.counts.sum(), eval_source.counts.sum(), num_classes)
  report = image_checks.skip_report({"train": train_source.skipped, "eval": eval_source.skipped})
  return ClassificationData(train=train, eval=_make_eval(eval_source, data_cfg, False),
                            raw_eval=_make_eval(eval_source, data_cfg, True), num_classes=num_classes,
                            class_names=tuple(class_names), train_counts=train_source.counts,
                            num_eval=int(eval_source.counts.sum()), data_report=report,
                            train_files=train_source.files,
                            run_files={LABELS_FILENAME: class_labels.labels_file_text(class_names),
                                       CLASS_BALANCE_FILENAME: class_labels.class_balance_csv(
                                           train_source.counts, class_names, data_cfg.min_class_count)},
                            new_train=lambda: _make_train(train_source, data_cfg, batch_size, seed))


def _evaluation_data(cfg, batch_size, seed, workdir):
  """The evaluation's ClassificationData: only the evaluation images are checked. The class names
  and training counts are the run's (its labels.txt and class_balance.csv); with class folders and
  data.eval_dir, data.train_dir is not read. new_train() reads the training data only when called:
  the BatchNorm calibration of a checkpoint's layers trained from random weights needs it."""
  run_names, run_counts = read_run_classes(workdir)
  class_names, _, eval_source = _make_sources(cfg, seed, workdir, for_training=False, run_names=run_names)
  if run_names is not None and list(class_names) != list(run_names):
    raise DataError(f"the data's {len(class_names)} classes ({', '.join(class_names[:3])}, ...) are not "
                    f"those of {os.path.join(workdir, LABELS_FILENAME)}, which the run was trained on")
  if run_counts is not None and len(run_counts) != len(class_names):
    raise DataError(f"{os.path.join(workdir, CLASS_BALANCE_FILENAME)}: {len(run_counts)} classes, but the "
                    f"data has {len(class_names)}; it is another run's, or the data changed")
  training = []

  def new_train():
    if not training:
      logging.info("reading the training data: the BatchNorm layers trained from random weights are "
                   "calibrated on training images, as in training")
      training.append(make_datasets(cfg, batch_size, seed, workdir))
    return training[0].new_train()

  logging.info("classification data: %s, %d eval images, %d classes", cfg.source, eval_source.counts.sum(),
               len(class_names))
  return ClassificationData(train=None, eval=_make_eval(eval_source, cfg, False),
                            raw_eval=_make_eval(eval_source, cfg, True), num_classes=len(class_names),
                            class_names=tuple(class_names), train_counts=run_counts,
                            num_eval=int(eval_source.counts.sum()), new_train=new_train,
                            data_report=image_checks.skip_report({"eval": eval_source.skipped}))


def read_run_classes(workdir):
  """(class names, training images per class) of the run in workdir, from its labels.txt and
  class_balance.csv; None for a file the workdir does not have. A file that is empty, cut short, or
  whose classes are not the other's is a DataError naming it."""
  if not workdir:
    return None, None
  labels, balance = (os.path.join(workdir, name) for name in (LABELS_FILENAME, CLASS_BALANCE_FILENAME))
  fix = "run the training command of this workdir again, which writes it anew"
  try:
    names = class_labels.read_labels_file(labels) if os.path.isfile(labels) else None
    counts = class_labels.read_class_balance(balance) if os.path.isfile(balance) else None
  except DataError as e:
    raise DataError(f"{e}; {fix}") from None
  if names is not None and counts is not None and len(counts) != len(names):
    raise DataError(f"{balance}: {len(counts)} classes, but {labels} names {len(names)}; {fix}")
  return names, counts


def _check_config(cfg):
  if cfg.source not in SOURCES:
    raise ConfigError(f"data.source '{cfg.source}' is unknown; choose one of {', '.join(SOURCES)}")
  needs_num_classes = cfg.source == "synthetic" or (cfg.source == "tfrecord" and not cfg.labels_file)
  if cfg.num_classes < 0 or (needs_num_classes and cfg.num_classes < 2):
    raise ConfigError(f"data.num_classes={cfg.num_classes}: data.source='{cfg.source}' needs "
                      "2 or more (0 = from the data, for folders, CSVs and labels files)")
  if not 0 < cfg.eval_fraction < 1:
    raise ConfigError(f"data.eval_fraction must be in (0, 1), got {cfg.eval_fraction}")
  for key in ("image_size", "shuffle_buffer", "eval_batch_size"):
    if cfg[key] < 1:
      raise ConfigError(f"data.{key} must be >= 1, got {cfg[key]}")
  if cfg.oversample_to < 0:
    raise ConfigError(f"data.oversample_to must be >= 0 (0 = off), got {cfg.oversample_to}")
  text_inputs.check_duplicates_mode(cfg.duplicates)


def _make_sources(cfg, seed, workdir, for_training=True, run_names=None):
  """(class names, train source, eval source) of the configured kind; for an evaluation
  (for_training=False) the train source is None, and run_names are the run's class names or None."""
  if cfg.source == "tfrecord":
    return _tfrecord_sources(cfg, for_training)
  if cfg.source == "csv":
    return _csv_sources(cfg, for_training)
  if cfg.source == "synthetic":
    train_dir, eval_dir = preprocessing.write_synthetic_classes(
        sources.synthetic_cache_dir(cfg.cache_dir, workdir), seed, cfg.num_classes,
        cfg.synthetic_images_per_class, cfg.synthetic_image_size)
    return _folder_sources(train_dir, eval_dir, cfg, for_training)
  if cfg.eval_dir and run_names is not None:  # an evaluation: the class folders are the run's
    return _eval_folder_source(cfg.eval_dir, run_names, cfg)
  train_dir = sources.required(cfg.train_dir, "train_dir", cfg.source)
  return _folder_sources(train_dir, cfg.eval_dir, cfg, for_training)


# Labels files and the class-balance report.


# Sources of image files: class folders, CSV, synthetic classes.


def list_class_folders(root):
  """(class names, [(path, class id)]) of a folder with one subfolder of images per class."""
  if not os.path.isdir(root):
    raise DataError(f"{root}: no such directory")
  names = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))
  if not names:
    raise DataError(f"{root}: no class folders (expected one subfolder of images per class)")
  examples = []
  for class_id, name in enumerate(names):
    paths = listing.list_files(os.path.join(root, name), listing.IMAGE_EXTENSIONS)
    examples.extend((path, class_id) for path in paths)
  return names, examples


def _eval_folder_source(eval_dir, class_names, cfg):
  """(class names, None, eval source) of an evaluation folder whose class folders must be class_names."""
  eval_names, examples = list_class_folders(eval_dir)
  if eval_names != list(class_names):
    extra = sorted(set(eval_names) ^ set(class_names))
    raise DataError(f"{eval_dir}: class folders differ from the run's classes (e.g. {extra[0]})")
  return class_names, None, _files_source(examples, len(class_names), cfg.skip_bad_files, eval_dir)


def _folder_sources(train_dir, eval_dir, cfg, for_training=True):
  class_names, examples = list_class_folders(train_dir)
  if eval_dir:
    eval_names, eval_examples = list_class_folders(eval_dir)
    if eval_names != class_names:
      extra = sorted(set(eval_names) ^ set(class_names))
      raise DataError(f"{eval_dir}: class folders differ from {train_dir}'s (e.g. {extra[0]})")
    # An image is known by its class folder and file name.
    text_inputs.check_overlap(*({os.path.relpath(path, root): path for path, _ in split}
                                for root, split in ((train_dir, examples), (eval_dir, eval_examples))),
                              "image", cfg.duplicates)
  else:
    examples, eval_examples = sources.split_by_hash(examples, cfg.eval_fraction, *_PATH_AND_CLASS)
  class_names = _check_num_classes(cfg, class_names, train_dir)
  return (class_names,
          _files_source(examples, len(class_names), cfg.skip_bad_files, train_dir) if for_training else None,
          _files_source(eval_examples, len(class_names), cfg.skip_bad_files, eval_dir or train_dir))


def _check_num_classes(cfg, class_names, where):
  if cfg.num_classes and cfg.num_classes != len(class_names):
    raise ConfigError(f"data.num_classes={cfg.num_classes}, but {where} has {len(class_names)} "
                      "classes; set data.num_classes to match (0 = take it from the data)")
  return class_names


def _csv_sources(cfg, for_training=True):
  path = sources.required(cfg.csv_path, "csv_path", cfg.source)
  images_dir = sources.required(cfg.images_dir, "images_dir", cfg.source)
  rows = class_labels.read_label_csv(path, images_dir, cfg.image_extension, cfg.duplicates)
  given_names = class_labels.read_labels_file(cfg.labels_file, cfg.duplicates) if cfg.labels_file else None
  if not given_names and cfg.num_classes < 2 and all(class_labels.is_int(label) for _, label, _ in rows):
    raise ConfigError(f"{path} has integer labels: set data.num_classes or data.labels_file")
  class_names, ids = class_labels.labels_to_ids([label for _, label, _ in rows], given_names,
                                                cfg.num_classes, path, [line for _, _, line in rows])
  class_names = _check_num_classes(cfg, class_names, path)
  examples = [(image, class_id) for (image, _, _), class_id in zip(rows, ids)]
  train, evaluation = sources.split_by_hash(examples, cfg.eval_fraction, *_PATH_AND_CLASS)
  return (class_names, _files_source(train, len(class_names), cfg.skip_bad_files, path) if for_training else None,
          _files_source(evaluation, len(class_names), cfg.skip_bad_files, path))


def _files_source(examples, num_classes, skip_bad_files, where):
  """A source of image files, every one decoded up front (corrupt ones named, or skipped and counted)."""
  if not examples:
    raise DataError(f"{where}: no image is held out for evaluation (a class needs 2 or more images "
                    "to give one)")
  label_of = dict(examples)
  paths, skipped = image_checks.check_images([path for path, _ in examples], skip_bad_files)
  labels = [label_of[path] for path in paths]

  def read(seed):
    return pipeline.read_files((paths, np.asarray(labels, np.int32)),
                               lambda path, label: (tf.io.read_file(path), label), seed)

  return _Source(read, class_labels.count_labels(labels, num_classes), skipped, paths)


# TF-Slim TFRecords.


def parse_tfrecord(record, labels_offset=0):
  """A TF-Slim example -> (encoded image bytes, int32 label - labels_offset).

  Records were checked up front (check_tfrecord_label), so there is one label per record.
  """
  features = tf.io.parse_single_example(record, TFRECORD_FEATURES)
  label = features["image/class/label"].values[0] - labels_offset
  return features["image/encoded"], tf.cast(label, tf.int32)


def tfrecord_values(record):
  """What check_tfrecord_label tests, from a TF-Slim example parsed and its image decoded as the
  pipelines do: (number of labels, the first label or -1, image shape)."""
  features = tfrecords.parse_example(record, TFRECORD_FEATURES)
  labels = features["image/class/label"].values
  image = image_checks.tf_decoded("image/encoded", image_checks.decode_image, features["image/encoded"])
  return tf.size(labels), tf.concat([labels, tf.constant([-1], tf.int64)], 0)[0], tf.shape(image)


def check_tfrecord_label(num_labels, first_label, num_classes, labels_offset, hint):
  """The class id of a record; a DataError for a record without exactly one label (a one-hot
  vector, say) or with one outside 0..num_classes-1 after subtracting labels_offset."""
  if num_labels != 1:
    one_hot = " (one-hot labels?)" if num_labels > 1 else ""
    raise DataError(f"{num_labels} values in image/class/label{one_hot}; expected one integer class id")
  error = class_labels.label_error(int(first_label) - labels_offset, num_classes, hint)
  if error:
    raise DataError(error)
  return int(first_label) - labels_offset


def _tfrecord_sources(cfg, for_training=True):
  class_names = class_labels.read_labels_file(cfg.labels_file, cfg.duplicates) if cfg.labels_file else None
  num_classes = len(class_names) if class_names else cfg.num_classes
  if class_names and cfg.num_classes and cfg.num_classes != num_classes:
    raise ConfigError(f"data.num_classes={cfg.num_classes}, but {cfg.labels_file} names "
                      f"{num_classes} classes")
  hint = f"data.labels_file names {num_classes} classes" if class_names else f"data.num_classes={num_classes}"
  if cfg.labels_offset:
    hint += f", after subtracting data.labels_offset={cfg.labels_offset}"
  class_names = class_names or [str(i) for i in range(num_classes)]

  def source(pattern):
    labels, skip = tfrecords.check_tfrecords(
        pattern, tfrecord_values,
        lambda num_labels, first_label, _: check_tfrecord_label(num_labels, first_label, num_classes,
                                                                cfg.labels_offset, hint),
        cfg.skip_bad_files)

    def read(seed):
      records = tfrecords.read_tfrecords(pattern, shuffle_seed=seed, repeat=seed is not None, skip=skip)
      if seed is not None:
        records = records.shuffle(cfg.shuffle_buffer, seed=seed)
      return records.map(lambda r: parse_tfrecord(r, cfg.labels_offset),
                         num_parallel_calls=tf.data.AUTOTUNE)

    return _Source(read, class_labels.count_labels(labels, num_classes), tfrecords.tfrecord_names(skip),
                   tfrecords.list_tfrecord_files(pattern))

  train = source(sources.required(cfg.train_pattern, "train_pattern", cfg.source)) if for_training else None
  return class_names, train, source(sources.required(cfg.eval_pattern, "eval_pattern", cfg.source))


# The pipelines every source shares.


def _make_train(source, cfg, batch_size, seed):
  size = cfg.image_size
  records = source.read(seed).enumerate()
  if cfg.oversample_to:
    records = pipeline.oversample(records, source.counts, cfg.oversample_to, seed)

  def preprocess(index, example):
    contents, label = example
    image = image_checks.decode_image(contents)
    if not cfg.augment:
      return preprocessing.preprocess_for_eval(image, size, size, cfg.central_fraction), label
    element_seed = tf.stack([tf.cast(seed, tf.int64), index])
    return preprocessing.preprocess_for_train(image, size, size, element_seed,
                                              fast_mode=cfg.fast_mode), label

  images = records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  return images.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _make_eval(source, cfg, uint8_images):
  size = cfg.image_size

  def preprocess(contents, label):
    image = image_checks.decode_image(contents)
    if uint8_images:
      return image, label
    return preprocessing.preprocess_for_eval(image, size, size, cfg.central_fraction), label

  images = source.read(None).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  batch_size = 1 if uint8_images else cfg.eval_batch_size  # uint8 images differ in size
  return images.batch(batch_size).prefetch(tf.data.AUTOTUNE)
