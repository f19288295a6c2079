"""Triplet's sources: identity folders (LFW's layout), the built-in synthetic identities
(triplet/synthetic.py) written once as such a folder, and LFW's pairs.txt for verification
(triplet/lfw_pairs.py), every image checked up front. The functions take data.py's DataSettings.
"""
import collections
import os

from absl import logging
import numpy as np

from common.contract.errors import DataError
from common.data import image_checks
from common.data import listing
from common.data import sources
from common.data import text_inputs
from common.data import tfds_sets
from triplet import lfw_pairs
from triplet import synthetic as synthetic_lib
from triplet import tfds_identities

# What batches do with identities that have fewer than K images.
SMALL_IDENTITY_MODES = ("error", "drop", "repeat")

Identity = collections.namedtuple("Identity", ["name", "directory", "paths"])
# paths/labels: images of held-out identities for retrieval; pairs: verification pairs in folds;
# skipped: {"eval": names, "pairs": names} of the files the checks skipped.
EvalData = collections.namedtuple("EvalData", ["paths", "labels", "pairs", "num_folds", "skipped"],
                                  defaults=[{}])


class Identities(list):
  """A list of Identity that also keeps the names of the files the checks skipped, for the data report,
  and what the source says its examples are (a TFDS split's fingerprint; "" for folders)."""

  def __init__(self, identities=(), skipped=(), fingerprint=""):
    super().__init__(identities)
    self.skipped = list(skipped)
    self.fingerprint = fingerprint


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
  return Identities(kept, getattr(identities, "skipped", ()), getattr(identities, "fingerprint", ""))


# Built-in synthetic identities (triplet/synthetic.py).


def prepare_synthetic(settings, seed, workdir):
  """Writes (once) the synthetic identities the DataSettings describe, at the load size; returns
  SyntheticData."""
  source = settings.source
  return synthetic_lib.make_synthetic_identities(
      sources.synthetic_cache_dir(source.cache_dir, workdir), source.num_train_identities,
      source.num_eval_identities, source.images_per_synthetic_identity, settings.images.load_size, seed,
      num_folds=source.num_pair_folds, pairs_per_fold=source.pairs_per_fold)


# What the settings name.


def load_train_identities(settings, seed, workdir):
  """The training identities after the policy for identities with fewer than K images."""
  fingerprint = ""
  if settings.source.source == "synthetic":
    root = prepare_synthetic(settings, seed, workdir).train_dir
  elif settings.source.source == tfds_sets.SOURCE:
    written = tfds_identities.prepare(settings.source, seed, workdir)
    root, fingerprint = written.train_dir, written.fingerprint
  else:
    root = sources.required(settings.source.train_dir, "train_dir", settings.source.source)
  identities = list_identities(root, settings.source.skip_bad_files)
  identities.fingerprint = fingerprint
  return select_identities(identities, settings.train.images_per_identity, settings.train.small_identities)


def load_eval_data(settings, seed, workdir):
  """The held-out identities and verification pairs that the DataSettings name.

  A held-out identity that is a training identity too (by folder name) is a
  DataError, or with data.duplicates="warn" a warning.
  """
  if settings.source.source in ("synthetic", tfds_sets.SOURCE):
    written = (prepare_synthetic(settings, seed, workdir) if settings.source.source == "synthetic"
               else tfds_identities.prepare(settings.source, seed, workdir))
    eval_dir, pairs_file, pairs_dir = written.eval_dir, written.pairs_path, written.eval_dir
  else:
    eval_dir, pairs_file = settings.source.eval_dir, settings.source.pairs_file
    pairs_dir = settings.source.pairs_dir or eval_dir  # read_settings: one of them with a pairs_file
  paths, labels, skipped = [], np.zeros([0], np.int64), {}
  if eval_dir:
    identities = list_identities(eval_dir, settings.source.skip_bad_files)
    if settings.source.source == "folder" and settings.source.train_dir:
      _check_identity_overlap(settings.source.train_dir, identities, settings.source.duplicates)
    paths, labels = identity_labels(identities)
    skipped["eval"] = identities.skipped
  pairs, num_folds = [], 0
  if pairs_file:
    pairs, num_folds = lfw_pairs.read_pairs(pairs_file, pairs_dir)
    pairs, skipped["pairs"] = lfw_pairs.check_pairs(pairs, settings.source.skip_bad_files)
  return EvalData(paths, labels, pairs, num_folds, skipped)


def _check_identity_overlap(train_dir, eval_identities, duplicates):
  train_names = [n for n in (os.listdir(train_dir) if os.path.isdir(train_dir) else [])
                 if not n.startswith(".") and os.path.isdir(os.path.join(train_dir, n))]
  text_inputs.check_overlap({name: os.path.join(train_dir, name) for name in train_names},
                            {i.name: i.directory for i in eval_identities}, "identity", duplicates)


def data_report(train_identities, eval_data):
  """What the checks skipped, for metrics.json (common/data/image_checks.skip_report)."""
  return image_checks.skip_report({"train": getattr(train_identities, "skipped", []), **eval_data.skipped})


def identity_labels(identities):
  """(paths, labels) of every image, labels indexing `identities`."""
  paths = [path for identity in identities for path in identity.paths]
  labels = np.repeat(np.arange(len(identities)), [len(identity.paths) for identity in identities])
  return paths, labels
