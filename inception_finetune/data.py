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
"""
import collections
import csv
import dataclasses
import io
import operator
import os
from typing import Callable

from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.data import image_checks
from common.data import listing
from common.data import sources
from common.data import text_inputs
from common.data import tfrecords
from common.contract.errors import ConfigError
from common.contract.errors import DataError
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
# Bump when the synthetic drawing changes, so that cached images are redrawn.
_SYNTHETIC_VERSION = 1


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
    data_report: what the checks skipped (common/data.skip_report), for metrics.json.
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
  report = class_balance_report(train_source.counts, class_names, data_cfg.min_class_count)
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
                            run_files={LABELS_FILENAME: labels_file_text(class_names),
                                       CLASS_BALANCE_FILENAME: class_balance_csv(
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
  class_balance.csv; None for a file the workdir does not have."""
  if not workdir:
    return None, None
  labels, balance = (os.path.join(workdir, name) for name in (LABELS_FILENAME, CLASS_BALANCE_FILENAME))
  names = read_labels_file(labels) if os.path.isfile(labels) else None
  counts = None
  if os.path.isfile(balance):
    with open(balance, newline="") as f:
      counts = np.array([int(row["train_images"]) for row in csv.DictReader(f)], np.int64)
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
    train_dir, eval_dir = write_synthetic_classes(
        sources.synthetic_cache_dir(cfg.cache_dir, workdir), seed, cfg.num_classes,
        cfg.synthetic_images_per_class, cfg.synthetic_image_size)
    return _folder_sources(train_dir, eval_dir, cfg, for_training)
  if cfg.eval_dir and run_names is not None:  # an evaluation: the class folders are the run's
    return _eval_folder_source(cfg.eval_dir, run_names, cfg)
  train_dir = sources.required(cfg.train_dir, "train_dir", cfg.source)
  return _folder_sources(train_dir, cfg.eval_dir, cfg, for_training)


# Labels files and the class-balance report.


def labels_file_text(class_names):
  """TF-Slim's labels file: one `<id>:<name>` line per class."""
  return "".join(f"{class_id}:{name}\n" for class_id, name in enumerate(class_names))


def read_labels_file(path, duplicates="error"):
  """Class names by id from a TF-Slim labels file; ids must be 0..N-1 (any order).

  An id or a name listed twice is a DataError, or with duplicates="warn" a
  warning (the first id and name are kept).
  """
  entries = []
  for line_number, line in text_inputs.read_text_lines(path, "labels file"):
    class_id, sep, name = line.partition(":")
    if not sep or not class_id.strip().isdigit() or not name.strip():
      raise DataError(f"{path}:{line_number}: expected '<id>:<name>', got {line.strip()!r}")
    entries.append((int(class_id), name, line_number))
  kept = text_inputs.first_entries(entries, path, "class id", duplicates, value_name="name")
  text_inputs.first_entries([(name, class_id, n) for class_id, name, n in kept], path, "class name",
                            duplicates, value_name="id")
  names = {class_id: name for class_id, name, _ in kept}
  if sorted(names) != list(range(len(names))):
    missing = sorted(set(range(max(names, default=-1) + 1)) - set(names))
    raise DataError(f"{path}: class ids must be 0..{len(names) - 1}; id {missing[0]} is missing")
  return [names[i] for i in range(len(names))]


def class_balance_report(counts, class_names, min_count):
  """Lines for the log: the spread of images per class and every class under min_count."""
  counts = np.asarray(counts)
  lines = [f"class balance: {len(counts)} classes, {counts.min()} to {counts.max()} training "
           f"images per class (median {np.median(counts):g})"]
  rare = [i for i in np.argsort(counts, kind="stable") if counts[i] < min_count]
  if rare:
    lines.append(f"{len(rare)} classes have fewer than {min_count} training images: " +
                 ", ".join(f"{class_names[i]} ({counts[i]})" for i in rare))
  return "\n".join(lines)


def class_balance_csv(counts, class_names, min_count):
  """The text of class_balance.csv: training images per class, and whether under min_count."""
  text = io.StringIO()
  writer = csv.writer(text)
  writer.writerow(["id", "name", "train_images", "under_min_count"])
  for class_id, (name, count) in enumerate(zip(class_names, counts)):
    writer.writerow([class_id, name, int(count), int(count < min_count)])
  return text.getvalue()


def _count_labels(labels, num_classes):
  return np.bincount(np.asarray(labels, np.int64), minlength=num_classes)


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


def read_label_csv(path, images_dir, extension, duplicates="error"):
  """[(image path, label string, line number)] of a CSV of `id,label` rows (a header starting with 'id'
  is skipped).

  The image of id X is <images_dir>/X<extension>, as in the dog-breed labels.csv.
  An empty field, a missing image or an id listed twice (with duplicates="warn":
  a warning, the first row kept) is a DataError naming the line.
  """
  entries = []
  for line_number, row in text_inputs.read_csv_rows(path, "CSV file"):
    if len(row) != 2:
      one_hot = " (one-hot columns are not labels)" if len(row) > 2 else ""
      raise DataError(f"{path}:{line_number}: {len(row)} columns; expected 'id,label' with one "
                      f"class name or id per image{one_hot}")
    if not entries and row[0].lower() == "id":
      continue
    image_id, label = row
    if not image_id or not label:
      raise DataError(f"{path}:{line_number}: empty {'label' if image_id else 'id'} in {','.join(row)!r}")
    entries.append((image_id, label, line_number))
  if not entries:
    raise DataError(f"{path}: no rows")
  rows = []
  for image_id, label, line_number in text_inputs.first_entries(entries, path, "id", duplicates, "label"):
    image = os.path.join(images_dir, image_id + extension)
    if not os.path.lexists(image):  # a link to nothing passes, for the image check to name it
      raise DataError(f"{image}: no such file ({path}:{line_number}; data.image_extension is "
                      f"'{extension}'{_other_extension_hint(image, extension)})")
    rows.append((image, label, line_number))
  return rows


def _other_extension_hint(image, extension):
  stem = image[:-len(extension)] if extension else image
  for other in listing.IMAGE_EXTENSIONS:
    for candidate in (other, other.upper()):
      if candidate != extension and os.path.isfile(stem + candidate):
        return f"; {os.path.basename(stem + candidate)} exists: set data.image_extension='{candidate}'"
  return ""


def labels_to_ids(labels, class_names, num_classes, path, lines):
  """Label strings of `path` (at `lines`) -> (class names, ids): names of `class_names`, or integer ids.

  Without class_names, integer labels are ids (0..num_classes-1) and any other
  labels are names, numbered in sorted order.
  """
  if not class_names and not all(_is_int(label) for label in labels):
    class_names = sorted(set(labels))
  hint = f"data.num_classes={num_classes}"
  if class_names:
    index = {}
    for i, name in enumerate(class_names):
      index.setdefault(name, i)  # a name listed twice (duplicates="warn") is its first id
    ids = []
    for label, line in zip(labels, lines):
      if label not in index and not _is_int(label):
        raise DataError(f"{path}:{line}: label '{label}' is not a class of data.labels_file")
      ids.append(index[label] if label in index else int(label))
    num_classes = len(class_names)
    hint = f"data.labels_file names {num_classes} classes"
  else:
    ids = [int(label) for label in labels]
    class_names = [str(i) for i in range(num_classes)]
  for class_id, line in zip(ids, lines):
    error = label_error(class_id, num_classes, hint)
    if error:
      raise DataError(f"{path}:{line}: {error}")
  return class_names, ids


def label_error(class_id, num_classes, hint):
  """What is wrong with a class id outside 0..num_classes-1 (hint: where num_classes comes from), or None."""
  if not 0 <= class_id < num_classes:
    return f"label {class_id} is out of range; expected 0..{num_classes - 1} ({hint})"
  return None


def _is_int(text):
  return text.lstrip("-").isdigit()


def _csv_sources(cfg, for_training=True):
  path = sources.required(cfg.csv_path, "csv_path", cfg.source)
  images_dir = sources.required(cfg.images_dir, "images_dir", cfg.source)
  rows = read_label_csv(path, images_dir, cfg.image_extension, cfg.duplicates)
  given_names = read_labels_file(cfg.labels_file, cfg.duplicates) if cfg.labels_file else None
  if not given_names and cfg.num_classes < 2 and all(_is_int(label) for _, label, _ in rows):
    raise ConfigError(f"{path} has integer labels: set data.num_classes or data.labels_file")
  class_names, ids = labels_to_ids([label for _, label, _ in rows], given_names, cfg.num_classes, path,
                                   [line for _, _, line in rows])
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
    files = tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, np.int32)))
    if seed is not None:
      files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True).repeat()
    return files.map(lambda path, label: (tf.io.read_file(path), label),
                     num_parallel_calls=tf.data.AUTOTUNE)

  return _Source(read, _count_labels(labels, num_classes), skipped, paths)


def draw_synthetic_image(class_id, num_classes, size, rng):
  """A procedural uint8 image of a class: its hue and stripe angle, with random phase and noise."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
  hue = class_id / num_classes
  angle = np.pi * ((class_id * 7) % num_classes) / num_classes
  frequency = 3.0 + (class_id % 3)
  phase = rng.uniform(0, 2 * np.pi)
  stripes = 0.5 + 0.5 * np.sin(2 * np.pi * frequency * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)
  base = np.array([0.5 + 0.5 * np.cos(2 * np.pi * (hue - shift)) for shift in (0, 1 / 3, 2 / 3)])
  brightness = rng.uniform(0.6, 1.0)
  image = brightness * (0.35 + 0.65 * stripes[..., None]) * base[None, None, :]
  image += rng.normal(0, 0.04, image.shape)
  return np.clip(image * 255, 0, 255).astype(np.uint8)


def write_synthetic_classes(cache_dir, seed, num_classes, images_per_class, size):
  """Writes class folders of synthetic JPEGs once; returns (train_dir, eval_dir).

  A fifth of each class (at least one image) goes to eval. The folder name
  holds every parameter, so other settings write their own set.
  """
  if images_per_class < 2:
    raise ConfigError(f"data.synthetic_images_per_class must be >= 2, got {images_per_class}")
  name = (f"synthetic-classes-v{_SYNTHETIC_VERSION}-seed{seed}-classes{num_classes}-"
          f"images{images_per_class}-size{size}")

  def draw(root):
    num_eval = max(images_per_class // 5, 1)
    for class_id in range(num_classes):
      rng = np.random.default_rng([seed, class_id])
      for index in range(images_per_class):
        folder = os.path.join(root, "eval" if index < num_eval else "train", f"class_{class_id:03d}")
        os.makedirs(folder, exist_ok=True)
        image = draw_synthetic_image(class_id, num_classes, size, rng)
        Image.fromarray(image).save(os.path.join(folder, f"{index:04d}.jpg"), quality=90)

  root = sources.write_once(cache_dir, name, draw)
  return os.path.join(root, "train"), os.path.join(root, "eval")


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
  error = label_error(int(first_label) - labels_offset, num_classes, hint)
  if error:
    raise DataError(error)
  return int(first_label) - labels_offset


def _tfrecord_sources(cfg, for_training=True):
  class_names = read_labels_file(cfg.labels_file, cfg.duplicates) if cfg.labels_file else None
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

    return _Source(read, _count_labels(labels, num_classes), tfrecords.tfrecord_names(skip),
                   tfrecords.list_tfrecord_files(pattern))

  train = source(sources.required(cfg.train_pattern, "train_pattern", cfg.source)) if for_training else None
  return class_names, train, source(sources.required(cfg.eval_pattern, "eval_pattern", cfg.source))


# The pipelines every source shares.


def oversampling_acceptance(counts, oversample_to):
  """Per-class probability of keeping an example so that class c is drawn in proportion
  to max(count_c, oversample_to): rare classes as though they had oversample_to images."""
  counts = np.maximum(np.asarray(counts, np.float64), 1)
  ratio = np.maximum(counts, oversample_to) / counts
  return (ratio / ratio.max()).astype(np.float32)


def _make_train(source, cfg, batch_size, seed):
  size = cfg.image_size
  records = source.read(seed).enumerate()
  if cfg.oversample_to:
    # Rejection sampling on the endless stream: frequent classes are thinned, so rare
    # ones come up relatively more often, with no copy of the data.
    acceptance = tf.constant(oversampling_acceptance(source.counts, cfg.oversample_to))

    def keep(index, example):
      draw_seed = tf.stack([tf.cast(seed, tf.int64) + 1, index])
      return tf.random.stateless_uniform([], draw_seed) < tf.gather(acceptance, example[1])

    records = records.filter(keep)

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
