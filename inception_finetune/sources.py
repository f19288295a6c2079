"""The sources of classified images, each in one shape (Source): synthetic classes (synthetic.py),
class folders, an id,label CSV and TF-Slim TFRecords. Every image (every record) is checked up front;
input_pipeline.py makes the pipelines.
The functions take the trainer's DataSettings (data.read_settings) or plain values.
"""
import collections
import operator
import os

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
from common.data import tfds_sets
from common.data import tfrecords
from inception_finetune import synthetic

# TF-Slim's keys (datasets/dataset_utils.image_to_tfexample).
TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string, default_value="jpeg"),
    "image/class/label": tf.io.VarLenFeature(tf.int64),
}
# An example of an image file is (path, class id); the eval split is per class.
_PATH_AND_CLASS = (operator.itemgetter(0), operator.itemgetter(1))

# A source in a uniform shape: read(seed) -> dataset of (encoded image bytes, int32 label),
# shuffled and endless with a seed, in order and once with None; counts per class of the
# images used; the names of those the check skipped; its files, or where it says what its examples
# are (TFDS) that fingerprint instead.
Source = collections.namedtuple("Source", ["read", "counts", "skipped", "files", "fingerprint"],
                                defaults=[None])


def make_sources(settings, seed, workdir, for_training=True, run_names=None):
  """(class names, train source, eval source) of the configured kind; for an evaluation
  (for_training=False) the train source is None, and run_names are the run's class names or None."""
  if settings.source == "tfrecord":
    return tfrecord_sources(settings, for_training)
  if settings.source == "tfds":
    return tfds_sources(settings, for_training)
  if settings.source == "csv":
    return csv_sources(settings, for_training)
  if settings.source == "synthetic":
    train_dir, eval_dir = synthetic.write_synthetic_classes(
        sources.synthetic_cache_dir(settings.cache_dir, workdir), seed, settings.num_classes,
        settings.synthetic_images_per_class, settings.synthetic_image_size)
    return folder_sources(train_dir, eval_dir, settings, for_training)
  if settings.eval_dir and run_names is not None:  # an evaluation: the class folders are the run's
    return eval_folder_source(settings.eval_dir, run_names, settings.skip_bad_files)
  train_dir = sources.required(settings.train_dir, "train_dir", settings.source)
  return folder_sources(train_dir, settings.eval_dir, settings, for_training)


# Image files: class folders, CSV.


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


def eval_folder_source(eval_dir, class_names, skip_bad_files):
  """(class names, None, eval source) of an evaluation folder whose class folders must be class_names."""
  eval_names, examples = list_class_folders(eval_dir)
  if eval_names != list(class_names):
    extra = sorted(set(eval_names) ^ set(class_names))
    raise DataError(f"{eval_dir}: class folders differ from the run's classes (e.g. {extra[0]})")
  return class_names, None, files_source(examples, len(class_names), skip_bad_files, eval_dir)


def folder_sources(train_dir, eval_dir, settings, for_training=True):
  """(class names, train source or None, eval source) of class folders; without eval_dir, eval images
  are held out of train_dir by file-name hash (data.eval_fraction)."""
  class_names, examples = list_class_folders(train_dir)
  if eval_dir:
    eval_names, eval_examples = list_class_folders(eval_dir)
    if eval_names != class_names:
      extra = sorted(set(eval_names) ^ set(class_names))
      raise DataError(f"{eval_dir}: class folders differ from {train_dir}'s (e.g. {extra[0]})")
    # An image is known by its class folder and file name.
    text_inputs.check_overlap(*({os.path.relpath(path, root): path for path, _ in split}
                                for root, split in ((train_dir, examples), (eval_dir, eval_examples))),
                              "image", settings.duplicates)
  else:
    examples, eval_examples = sources.split_by_hash(examples, settings.eval_fraction, *_PATH_AND_CLASS)
  class_names = check_num_classes(settings.num_classes, class_names, train_dir)
  skip = settings.skip_bad_files
  return (class_names, files_source(examples, len(class_names), skip, train_dir) if for_training else None,
          files_source(eval_examples, len(class_names), skip, eval_dir or train_dir))


def check_num_classes(num_classes, class_names, where):
  """class_names, whose number data.num_classes (0 = any) must match."""
  if num_classes and num_classes != len(class_names):
    raise ConfigError(f"data.num_classes={num_classes}, but {where} has {len(class_names)} "
                      "classes; set data.num_classes to match (0 = take it from the data)")
  return class_names


def csv_sources(settings, for_training=True):
  """(class names, train source or None, eval source) of an id,label CSV, split by file-name hash."""
  path = sources.required(settings.csv_path, "csv_path", settings.source)
  images_dir = sources.required(settings.images_dir, "images_dir", settings.source)
  rows = class_labels.read_label_csv(path, images_dir, settings.image_extension, settings.duplicates)
  given_names = (class_labels.read_labels_file(settings.labels_file, settings.duplicates)
                 if settings.labels_file else None)
  if not given_names and settings.num_classes < 2 and all(class_labels.is_int(label)
                                                          for _, label, _ in rows):
    raise ConfigError(f"{path} has integer labels: set data.num_classes or data.labels_file")
  class_names, ids = class_labels.labels_to_ids([label for _, label, _ in rows], given_names,
                                                settings.num_classes, path, [line for _, _, line in rows])
  class_names = check_num_classes(settings.num_classes, class_names, path)
  examples = [(image, class_id) for (image, _, _), class_id in zip(rows, ids)]
  train, evaluation = sources.split_by_hash(examples, settings.eval_fraction, *_PATH_AND_CLASS)
  skip = settings.skip_bad_files
  return (class_names, files_source(train, len(class_names), skip, path) if for_training else None,
          files_source(evaluation, len(class_names), skip, path))


def files_source(examples, num_classes, skip_bad_files, where):
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

  return Source(read, class_labels.count_labels(labels, num_classes), skipped, paths)


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


def tfrecord_sources(settings, for_training=True):
  """(class names, train source or None, eval source) of TF-Slim TFRecord shards, every record checked."""
  train_pattern = (sources.required(settings.train_pattern, "train_pattern", settings.source)
                   if for_training else None)
  eval_pattern = sources.required(settings.eval_pattern, "eval_pattern", settings.source)
  class_names = (class_labels.read_labels_file(settings.labels_file, settings.duplicates)
                 if settings.labels_file else None)
  num_classes = len(class_names) if class_names else settings.num_classes
  if class_names and settings.num_classes and settings.num_classes != num_classes:
    raise ConfigError(f"data.num_classes={settings.num_classes}, but {settings.labels_file} names "
                      f"{num_classes} classes")
  hint = f"data.labels_file names {num_classes} classes" if class_names else f"data.num_classes={num_classes}"
  if settings.labels_offset:
    hint += f", after subtracting data.labels_offset={settings.labels_offset}"
  class_names = class_names or [str(i) for i in range(num_classes)]

  def source(pattern):
    labels, skip = tfrecords.check_tfrecords(
        pattern, tfrecord_values,
        lambda num_labels, first_label, _: check_tfrecord_label(num_labels, first_label, num_classes,
                                                                settings.labels_offset, hint),
        settings.skip_bad_files)

    def read(seed):
      records = tfrecords.read_tfrecords(pattern, shuffle_seed=seed, repeat=seed is not None, skip=skip)
      if seed is not None:
        records = records.shuffle(settings.shuffle_buffer, seed=seed)
      return records.map(lambda r: parse_tfrecord(r, settings.labels_offset),
                         num_parallel_calls=tf.data.AUTOTUNE)

    return Source(read, class_labels.count_labels(labels, num_classes), tfrecords.tfrecord_names(skip),
                   tfrecords.list_tfrecord_files(pattern))

  return class_names, source(train_pattern) if for_training else None, source(eval_pattern)


# TensorFlow Datasets (common/data/tfds_sets.py): an image feature and a ClassLabel label.


def tfds_sources(settings, for_training=True):
  """(class names, train source or None, eval source) of data.tfds_train_split and
  data.tfds_eval_split; the class names are the label feature's."""
  sources.required(settings.tfds.tfds_eval_split, tfds_sets.EVAL_SPLIT_KEY, settings.source)

  def check_features(builder):
    tfds_sets.image_feature(builder, "image", None, "the images")
    tfds_sets.feature(builder, "label", "ClassLabel", "the class ids")

  builder, train, evaluation = settings.tfds.open(check_features, for_training)
  label = builder.info.features["label"]
  class_names = check_num_classes(settings.num_classes, list(label.names), f"data.tfds_name={builder.name}")

  def source(split):
    def read(seed):
      examples = split.read(seed, settings.shuffle_buffer, encoded=("image",))
      return examples.map(lambda e: (e["image"], tf.cast(e["label"], tf.int32)),
                          num_parallel_calls=tf.data.AUTOTUNE)

    # The labels alone, read once for the class balance (the images stay encoded).
    labels = np.concatenate([batch["label"] for batch in split.read(None, 1, encoded=("image",))
                             .map(lambda e: {"label": e["label"]}).batch(4096).as_numpy_iterator()])
    return Source(read, class_labels.count_labels(labels, len(class_names)), [], [], split.fingerprint())

  return class_names, source(train) if for_training else None, source(evaluation)
