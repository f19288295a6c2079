"""A TFDS data set's faces as identity folders (LFW's layout), written once under the cache folder, so
that the triplet trainer reads them as it reads any identity folder (triplet/sources.py).

The identity is the label feature: a Text feature (lfw's person names) or a ClassLabel's names. The
evaluation identities are data.tfds_eval_split's, or without one a data.tfds_eval_fraction of the
training split's identities, held out by a hash of their names (not by the seed, so runs of other
seeds are evaluated alike). The verification pairs, LFW's format, are drawn from the seed over the
evaluation identities: they are not LFW's published pairs.txt (use the folder source with it for those).
"""
import collections
import hashlib
import os

import numpy as np

from common.contract.errors import DataError
from common.data import sources
from common.data import tfds_sets
from triplet import lfw_pairs

Written = collections.namedtuple("Written", ["train_dir", "eval_dir", "pairs_path", "fingerprint"])


def prepare(settings, seed, workdir):
  """Written(train_dir, eval_dir, pairs_path, the train split's fingerprint) of the SourceSettings'
  data set, written once under data.cache_dir (else <workdir>/data)."""
  def check_features(builder):
    tfds_sets.image_feature(builder, "image", None, "the faces")
    tfds_sets.feature(builder, "label", ("Text", "ClassLabel"), "the identities")

  builder, train, evaluation = settings.tfds.open(check_features)
  label = builder.info.features["label"]
  names = label.names if type(label).__name__ == "ClassLabel" else None
  held_out = "" if evaluation else f"{settings.tfds_eval_fraction:g}"
  fingerprints = [split.fingerprint() for split in (train, evaluation) if split]
  key_digest = hashlib.sha256("|".join(fingerprints + [held_out]).encode()).hexdigest()[:12]
  pairs = f"{settings.num_pair_folds}x{settings.pairs_per_fold}"

  def write(directory):
    train_dir, eval_dir = os.path.join(directory, "train"), os.path.join(directory, "eval")
    counts = _write_faces(train, names, train_dir)
    if evaluation:
      eval_counts = _write_faces(evaluation, names, eval_dir)
    else:  # the held-out identities' folders move from train/ to eval/
      _, held = sources.split_by_hash(sorted(counts), settings.tfds_eval_fraction, path_fn=str)
      if not held:
        raise DataError(f"data.tfds_train_split='{train.split}' of '{builder.name}' has {len(counts)} "
                        "identity: none to hold out for evaluation")
      os.makedirs(eval_dir)
      for name in held:
        os.rename(os.path.join(train_dir, name), os.path.join(eval_dir, name))
      eval_counts = {name: counts[name] for name in sorted(held)}
    try:
      lfw_pairs.write_pairs_file(os.path.join(directory, "pairs.txt"), eval_counts, settings.num_pair_folds,
                                 settings.pairs_per_fold, np.random.default_rng(seed))
    except ValueError as e:
      raise DataError(f"the evaluation identities of '{builder.name}': {e}") from None

  directory = sources.write_once(sources.synthetic_cache_dir(settings.cache_dir, workdir),
                                 f"tfds_{builder.name}_{key_digest}_seed{seed}_pairs{pairs}", write)
  return Written(os.path.join(directory, "train"), os.path.join(directory, "eval"),
                 os.path.join(directory, "pairs.txt"), fingerprints[0])


def _write_faces(split, class_names, root):
  """Writes each face of a split, in its stored order, as <root>/<name>/<name>_0001.jpg (.png, as
  stored), LFW's names; returns {identity name: images}."""
  counts = collections.Counter()
  for example in split.read(None, 1, encoded=("image",)).as_numpy_iterator():
    label = example["label"]
    name = class_names[label] if class_names is not None else label.decode("utf-8")
    name = name.replace("/", "_").strip() or "_"
    counts[name] += 1
    if counts[name] == 1:
      os.makedirs(os.path.join(root, name))
    contents = example["image"]
    extension = ".jpg" if contents[:2] == b"\xff\xd8" else ".png"
    with open(os.path.join(root, name, f"{name}_{counts[name]:04d}{extension}"), "wb") as f:
      f.write(contents)
  return dict(counts)
