"""Identity datasets for embedding training: sources, P x K batches, evaluation sets.

Sources: a folder per identity (LFW's layout), built-in synthetic identities
(triplet/synthetic.py) written once as such a folder, and LFW's pairs.txt for
verification (read by triplet/lfw_pairs.py). The config's data section is read
once, by read_settings, into the frozen DataSettings that the functions here take.
Training batches hold P identities with K images each, sampled entirely
inside tf.data with stateless seeds, so the iterator can be checkpointed and a
run replays the same batches; each batch is identity-major (K consecutive
images per identity), so splitting it across replicas keeps whole identities
together when P is a multiple of the replica count.
"""
import collections
import dataclasses
import os

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract import bounds
from common.contract import checks
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import image_checks
from triplet import lfw_pairs
from common.data import listing
from common.data import normalization
from common.data import sources
from common.data import text_inputs
from triplet import synthetic as synthetic_lib

# What batches do with identities that have fewer than K images.
SMALL_IDENTITY_MODES = ("error", "drop", "repeat")

Identity = collections.namedtuple("Identity", ["name", "directory", "paths"])
# paths/labels: images of held-out identities for retrieval; pairs: verification pairs in folds;
# skipped: {"eval": names, "pairs": names} of the files the checks skipped.
EvalData = collections.namedtuple("EvalData", ["paths", "labels", "pairs", "num_folds", "skipped"],
                                  defaults=[{}])


class Identities(list):
  """A list of Identity that also keeps the names of the files the checks skipped, for the data report."""

  def __init__(self, identities=(), skipped=()):
    super().__init__(identities)
    self.skipped = list(skipped)


# Independent random streams derived from the one seed.
_IDENTITY_ORDER_STREAM, _IMAGE_PICK_STREAM, _AUGMENT_STREAM = 1, 2, 3


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section (configs/triplet.py), read once by read_settings and checked: what
  the functions of this module take instead of the config. P x K batches; then the folder source's
  paths ("" = none); then the synthetic source's identities, written once under cache_dir."""
  source: str
  identities_per_batch: int
  images_per_identity: int
  small_identities: str
  skip_bad_files: bool
  duplicates: str
  load_size: int
  crop_size: int
  random_flip: bool
  normalization: str
  eval_batch_size: int
  train_dir: str
  eval_dir: str
  pairs_file: str
  pairs_dir: str
  cache_dir: str
  num_train_identities: int
  num_eval_identities: int
  images_per_synthetic_identity: int
  num_pair_folds: int
  pairs_per_fold: int


# bounds.check's: the data section's counts and sizes.
BOUNDS = {
    **dict.fromkeys(["data.load_size", "data.crop_size"], bounds.SIDE),
    **dict.fromkeys(["data.identities_per_batch", "data.images_per_identity", "data.eval_batch_size"],
                    bounds.BATCH),
    **dict.fromkeys(["data.num_train_identities", "data.num_eval_identities", "data.pairs_per_fold"],
                    bounds.IMAGES),
    "data.images_per_synthetic_identity": (1000, "the images a synthetic identity makes in memory"),
    "data.num_pair_folds": (100, "cross-validation folds of the verification pairs (LFW's protocol has 10)"),
}


def read_settings(data_cfg):
  """The config's data section -> DataSettings, every value checked before any file is listed: a
  ConfigError naming the first bad one (data.<key>). The checks that need another section (the
  loss, the batch size) are task.validate_config's."""
  values = {field.name: data_cfg[field.name] for field in dataclasses.fields(DataSettings)}
  checks.check_values({"data": values}, {
      "data.source": checks.one_of("synthetic", "folder"),
      "data.small_identities": checks.one_of(*SMALL_IDENTITY_MODES),
      "data.identities_per_batch": checks.integer(2),  # negatives need a second identity
      "data.images_per_identity": checks.POSITIVE_INT,
      "data.skip_bad_files": checks.BOOL,
      "data.random_flip": checks.BOOL,
      "data.normalization": checks.one_of(*normalization.SCHEMES),
      **dict.fromkeys(["data.load_size", "data.crop_size", "data.eval_batch_size",
                       "data.num_train_identities", "data.num_pair_folds", "data.pairs_per_fold"],
                      checks.POSITIVE_INT),
      # Verification pairs need two identities with two images each.
      "data.num_eval_identities": checks.integer(2),
      "data.images_per_synthetic_identity": checks.integer(2),
  })
  bounds.check({"data": values}, BOUNDS)
  text_inputs.check_duplicates_mode(values["duplicates"])
  for key in ("train_dir", "eval_dir", "pairs_file", "pairs_dir", "cache_dir"):
    values[key] = values[key] or ""
  settings = DataSettings(**values)
  if settings.crop_size > settings.load_size:
    raise ConfigError(f"data.crop_size={settings.crop_size} must be in "
                      f"1..data.load_size={settings.load_size}")
  if settings.source == "folder" and settings.pairs_file and not (settings.pairs_dir or settings.eval_dir):
    raise ConfigError(f"data.pairs_file={settings.pairs_file} needs data.pairs_dir or data.eval_dir")
  return settings


# Folder layout: one directory per identity.


def list_identities(root, skip_bad_files=False):
  """Identities under `root` (one directory each), sorted by name, with their decodable images.

  A file without an image extension, or one that does not decode, is a
  DataError naming it, or skipped and counted when skip_bad_files (their
  names in the Identities' `skipped`). Hidden entries (".DS_Store") are ignored.
  """
  if not os.path.isdir(root):
    raise DataError(f"{root}: no such directory")
  names = sorted(n for n in os.listdir(root)
                 if not n.startswith(".") and os.path.isdir(os.path.join(root, n)))
  if not names:
    raise DataError(f"{root}: no identity directories (expected one directory per identity)")
  candidates, non_images = {}, []
  for name in names:
    directory = os.path.join(root, name)
    files = [os.path.join(directory, f) for f in listing.file_names(directory)]
    candidates[name] = [f for f in files if f.lower().endswith(listing.IMAGE_EXTENSIONS)]
    non_images += [f for f in files if not f.lower().endswith(listing.IMAGE_EXTENSIONS)]
  if non_images and not skip_bad_files:
    raise DataError(f"{non_images[0]}: not an image (expected one of "
                    f"{', '.join(listing.IMAGE_EXTENSIONS)}); data.skip_bad_files=True skips such files")
  for path in non_images:
    logging.warning("skipping: %s: not an image", path)
  if non_images:
    logging.warning("skipped %d files that are not images under %s, e.g. %s",
                    len(non_images), root, non_images[0])
  all_paths = [p for name in names for p in candidates[name]]
  good, _, skipped = image_checks.check_files(all_paths, image_checks.check_image, skip_bad_files)
  good = set(good)
  return Identities([Identity(name, os.path.join(root, name), [p for p in candidates[name] if p in good])
                     for name in names], non_images + skipped)


def select_identities(identities, images_per_identity, small_identities="error"):
  """Applies the policy for identities with fewer than K images; logs what it did.

  "error": DataError naming the first such directory; "drop": leave them out;
  "repeat": batches reuse their images (identities with no image are dropped).
  """
  if small_identities not in SMALL_IDENTITY_MODES:
    raise ValueError(f"small_identities='{small_identities}' is not one of {SMALL_IDENTITY_MODES}")
  k = images_per_identity
  small = [i for i in identities if len(i.paths) < k]
  if small and small_identities == "error":
    raise DataError(
        f"{small[0].directory}: {len(small[0].paths)} image(s), but a batch takes "
        f"data.images_per_identity={k} per identity ({len(small)} of {len(identities)} identities are "
        "short); set data.small_identities to 'drop' or 'repeat' to use the others")
  if small_identities == "drop":
    kept = [i for i in identities if len(i.paths) >= k]
    if small:
      logging.warning("dropped %d of %d identities with fewer than %d images",
                      len(small), len(identities), k)
  else:
    kept = [i for i in identities if i.paths]
    if small:
      logging.warning("%d of %d identities have fewer than %d images: batches repeat their images "
                      "(%d with no image dropped)", len(small), len(identities), k,
                      len(identities) - len(kept))
  logging.info("%d identities, %d images", len(kept), sum(len(i.paths) for i in kept))
  return Identities(kept, getattr(identities, "skipped", ()))


# Built-in synthetic identities (triplet/synthetic.py).


def prepare_synthetic(settings, seed, workdir):
  """Writes (once) the synthetic identities the DataSettings describe; returns SyntheticData."""
  return synthetic_lib.make_synthetic_identities(
      sources.synthetic_cache_dir(settings.cache_dir, workdir), settings.num_train_identities,
      settings.num_eval_identities, settings.images_per_synthetic_identity, settings.load_size, seed,
      num_folds=settings.num_pair_folds, pairs_per_fold=settings.pairs_per_fold)


# What the settings name.


def load_train_identities(settings, seed, workdir):
  """The training identities after the policy for identities with fewer than K images."""
  if settings.source == "synthetic":
    root = prepare_synthetic(settings, seed, workdir).train_dir
  else:
    root = sources.required(settings.train_dir, "train_dir", settings.source)
  identities = list_identities(root, settings.skip_bad_files)
  return select_identities(identities, settings.images_per_identity, settings.small_identities)


def load_eval_data(settings, seed, workdir):
  """The held-out identities and verification pairs that the DataSettings name.

  A held-out identity that is a training identity too (by folder name) is a
  DataError, or with data.duplicates="warn" a warning.
  """
  if settings.source == "synthetic":
    synthetic = prepare_synthetic(settings, seed, workdir)
    eval_dir, pairs_file, pairs_dir = synthetic.eval_dir, synthetic.pairs_path, synthetic.eval_dir
  else:
    eval_dir, pairs_file = settings.eval_dir, settings.pairs_file
    pairs_dir = settings.pairs_dir or eval_dir  # read_settings: one of them with a pairs_file
  paths, labels, skipped = [], np.zeros([0], np.int64), {}
  if eval_dir:
    identities = list_identities(eval_dir, settings.skip_bad_files)
    if settings.source == "folder" and settings.train_dir:
      _check_identity_overlap(settings.train_dir, identities, settings.duplicates)
    paths, labels = identity_labels(identities)
    skipped["eval"] = identities.skipped
  pairs, num_folds = [], 0
  if pairs_file:
    pairs, num_folds = lfw_pairs.read_pairs(pairs_file, pairs_dir)
    pairs, skipped["pairs"] = lfw_pairs.check_pairs(pairs, settings.skip_bad_files)
  return EvalData(paths, labels, pairs, num_folds, skipped)


def _check_identity_overlap(train_dir, eval_identities, duplicates):
  train_names = [n for n in (os.listdir(train_dir) if os.path.isdir(train_dir) else [])
                 if not n.startswith(".") and os.path.isdir(os.path.join(train_dir, n))]
  text_inputs.check_overlap({name: os.path.join(train_dir, name) for name in train_names},
                            {i.name: i.directory for i in eval_identities}, "identity", duplicates)


def data_report(train_identities, eval_data):
  """What the checks skipped, for metrics.json (common/data/image_checks.skip_report)."""
  return image_checks.skip_report({"train": getattr(train_identities, "skipped", []), **eval_data.skipped})


# tf.data pipelines.


def load_image(path, load_size):
  """File -> uint8-valued float32 [load_size, load_size, 3] (resized when it is another size)."""
  image = image_checks.decode_image(tf.io.read_file(path))
  return tf.image.resize(image, [load_size, load_size])


def preprocess_for_train(image, crop_size, seed, normalizer, flip=True):
  """Random crop_size crop and, with flip, horizontal flip (stateless, from a [2] seed), then
  normalization."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  image = tf.image.stateless_random_crop(image, [crop_size, crop_size, 3], crop_seed)
  if flip:
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
  return normalizer(image)


def preprocess_for_eval(image, crop_size, normalizer):
  """Central crop_size crop of an image or a batch, then normalization."""
  offset_h = (tf.shape(image)[-3] - crop_size) // 2
  offset_w = (tf.shape(image)[-2] - crop_size) // 2
  image = tf.image.crop_to_bounding_box(image, offset_h, offset_w, crop_size, crop_size)
  return normalizer(image)


def _stream_seed(seed, stream, index):
  """A [2] stateless seed for element `index` of an independent stream."""
  base = tf.constant([seed, stream], tf.int64)
  return tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))


def _identity_batches(num_identities, p, seed):
  """Endless [P] identity indices: each epoch a fresh permutation, every identity once per epoch.

  An epoch is ceil(N / P) batches; its last batch is topped up with identities
  from the start of the permutation, which are distinct from the ones it holds.
  """
  batches_per_epoch = -(-num_identities // p)

  def epoch_batches(epoch):
    scores = tf.random.stateless_uniform([num_identities], _stream_seed(seed, _IDENTITY_ORDER_STREAM, epoch))
    order = tf.argsort(scores)
    order = tf.concat([order, order[:batches_per_epoch * p - num_identities]], axis=0)
    return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [batches_per_epoch, p]))

  return tf.data.Dataset.counter().flat_map(epoch_batches)


def _pick_images(starts, counts, k, seed):
  """(batch index, [P] identities) -> [P * K] file indices and labels, K per identity.

  Each identity's images come in a random order; identities with fewer than K
  images cycle through theirs (the "repeat" policy).
  """

  def pick(batch_index, identities):
    identity_counts = tf.gather(counts, identities)
    longest = tf.reduce_max(identity_counts)
    scores = tf.random.stateless_uniform(
        tf.stack([tf.size(identities), longest]), _stream_seed(seed, _IMAGE_PICK_STREAM, batch_index))
    # Positions past an identity's image count sort last.
    scores = tf.where(tf.range(longest)[None, :] < identity_counts[:, None], scores, 2.0)
    order = tf.argsort(scores, axis=1)
    columns = tf.range(k)[None, :] % identity_counts[:, None]
    files = tf.gather(order, columns, batch_dims=1) + tf.gather(starts, identities)[:, None]
    labels = tf.repeat(identities, k)
    return tf.reshape(files, [-1]), labels

  return pick


def make_train_dataset(identities, identities_per_batch, images_per_identity, load_size, crop_size,
                       normalization_name, seed, flip=True):
  """Endless batches (images [P*K, crop, crop, 3] float32, labels [P*K] int32).

  Labels index `identities`. Every batch holds P distinct identities, K images
  each, identity-major; over ceil(N / P) batches every identity appears.
  """
  normalizer = normalization.get_normalizer(normalization_name)
  p, k = identities_per_batch, images_per_identity
  if len(identities) < p:
    where = os.path.dirname(identities[0].directory) if identities else "the data"
    raise DataError(f"{where}: {len(identities)} usable identities, but a batch takes "
                    f"data.identities_per_batch={p} distinct ones; lower it or add identities")
  paths = tf.constant([path for identity in identities for path in identity.paths])
  counts = np.array([len(identity.paths) for identity in identities], np.int32)
  starts = tf.constant(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32))
  counts = tf.constant(counts)

  def load(index, file_and_label):
    file_index, label = file_and_label
    image = load_image(tf.gather(paths, file_index), load_size)
    return preprocess_for_train(image, crop_size, _stream_seed(seed, _AUGMENT_STREAM, index),
                                normalizer, flip), label

  dataset = _identity_batches(len(identities), p, seed).enumerate()
  dataset = dataset.map(_pick_images(starts, counts, k, seed)).unbatch().enumerate()
  dataset = dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(p * k, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(paths, load_size, crop_size, normalization_name, batch_size):
  """Center-cropped images of `paths`, in order, in batches of batch_size (the last may be smaller)."""
  normalizer = normalization.get_normalizer(normalization_name)
  dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string))
  dataset = dataset.map(lambda path: preprocess_for_eval(load_image(path, load_size), crop_size, normalizer),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def make_uint8_dataset(paths, load_size, batch_size):
  """Images of `paths` resized to load_size, as uint8, in order: what an exported model takes."""
  dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string))
  dataset = dataset.map(lambda path: tf.cast(tf.round(load_image(path, load_size)), tf.uint8),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def identity_labels(identities):
  """(paths, labels) of every image, labels indexing `identities`."""
  paths = [path for identity in identities for path in identity.paths]
  labels = np.repeat(np.arange(len(identities)), [len(identity.paths) for identity in identities])
  return paths, labels
