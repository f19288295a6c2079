"""Evaluates an embedding model: verification (LFW protocol), VAL at FAR 1e-3, recall@k, ROC curve.

python -m triplet.evaluate --config=configs/triplet.py --workdir=runs/triplet
python -m triplet.evaluate --config=configs/triplet.py --saved_model=runs/triplet/saved_model

Metrics go to stdout as JSON; the ROC curve of the verification pairs to --roc_png.
"""
import collections
import json
import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from common import cli
from common import train_loop
from common.errors import CheckpointError
from common.errors import ConfigError
from triplet import data as data_lib
from triplet import metrics
from triplet import model as model_lib

# The false accept rate at which VAL is reported (FaceNet's and LFW's 1e-3).
TARGET_FAR = 1e-3

# paths/labels: images of held-out identities for retrieval; pairs: verification pairs in folds.
EvalData = collections.namedtuple("EvalData", ["paths", "labels", "pairs", "num_folds"])


def prepare_synthetic(data_config, seed, workdir):
  """Writes (once) the synthetic identities the config describes; returns data.SyntheticData."""
  return data_lib.make_synthetic_identities(
      data_config.cache_dir or os.path.join(workdir, "data"), data_config.num_train_identities,
      data_config.num_eval_identities, data_config.images_per_synthetic_identity,
      data_config.load_size, seed, num_folds=data_config.num_pair_folds,
      pairs_per_fold=data_config.pairs_per_fold)


def load_eval_data(data_config, seed, workdir):
  """The held-out identities and verification pairs that the config names."""
  if data_config.source == "synthetic":
    synthetic = prepare_synthetic(data_config, seed, workdir)
    eval_dir, pairs_file, pairs_dir = synthetic.eval_dir, synthetic.pairs_path, synthetic.eval_dir
  elif data_config.source == "folder":
    eval_dir, pairs_file = data_config.eval_dir, data_config.pairs_file
    pairs_dir = data_config.pairs_dir or eval_dir
    if pairs_file and not pairs_dir:
      raise ConfigError(f"data.pairs_file={pairs_file} needs data.pairs_dir or data.eval_dir")
  else:
    raise ConfigError(f"data.source='{data_config.source}' is not one of synthetic, folder")
  paths, labels = [], np.zeros([0], np.int64)
  if eval_dir:
    identities = data_lib.list_identities(eval_dir, data_config.skip_bad_files)
    paths, labels = data_lib.identity_labels(identities)
  pairs, num_folds = [], 0
  if pairs_file:
    pairs, num_folds = data_lib.read_pairs(pairs_file, pairs_dir)
    pairs = data_lib.check_pairs(pairs, data_config.skip_bad_files)
  return EvalData(paths, labels, pairs, num_folds)


def images_to_embed(eval_data):
  """Every image the metrics need, each once."""
  pair_paths = [p for pair in eval_data.pairs for p in pair[:2]]
  return list(dict.fromkeys(list(eval_data.paths) + pair_paths))


def compute_embeddings(embed_fn, dataset):
  return np.concatenate([np.asarray(embed_fn(images)) for images in dataset], axis=0)


def score(embeddings_by_path, eval_data):
  """Returns (metrics dict, (false accept rates, true accept rates) or None)."""
  results = {}
  if len(eval_data.paths) and np.max(np.bincount(eval_data.labels)) > 1:
    embeddings = np.stack([embeddings_by_path[p] for p in eval_data.paths])
    recall = metrics.recall_at_k(embeddings, eval_data.labels, ks=(1, 5))
    results.update({f"recall_at_{k}": value for k, value in recall.items()})
  if not eval_data.pairs:
    return results, None
  distances = metrics.pair_distances(
      np.stack([embeddings_by_path[p.path_a] for p in eval_data.pairs]),
      np.stack([embeddings_by_path[p.path_b] for p in eval_data.pairs]))
  is_same = np.array([p.is_same for p in eval_data.pairs])
  verification = metrics.verification_accuracy(distances, is_same, eval_data.num_folds)
  val = metrics.val_at_far(distances, is_same, TARGET_FAR, eval_data.num_folds)
  results.update({
      "verification_accuracy": verification["accuracy"],
      "verification_accuracy_std": verification["accuracy_std"],
      "verification_threshold": verification["threshold"],
      "val_at_far_1e-3": val["val"],
      "val_far_achieved": val["far"],
  })
  return results, metrics.roc_curve(distances, is_same)


def evaluate(embed_fn, dataset, paths, eval_data):
  """Embeds `dataset` (the images of `paths`, in order) and scores them; see score()."""
  embeddings = compute_embeddings(embed_fn, dataset)
  return score(dict(zip(paths, embeddings)), eval_data)


def make_embed_fn(embedding_model):
  """A compiled inference pass that does not retrace for a smaller last batch."""
  return tf.function(lambda images: embedding_model(images, training=False), reduce_retracing=True)


def make_evaluate_fn(embedding_model, eval_data, data_config):
  """evaluate_fn(model) -> metrics, for the training loop; the model's embedding part is scored."""
  paths = images_to_embed(eval_data)
  dataset = data_lib.make_eval_dataset(paths, data_config.load_size, data_config.crop_size,
                                       data_config.normalization, data_config.eval_batch_size)
  embed_fn = make_embed_fn(embedding_model)
  return lambda _: evaluate(embed_fn, dataset, paths, eval_data)[0]


def build_embedding_model_from_config(config):
  crop = config.data.crop_size
  return model_lib.build_embedding_model(
      (crop, crop, 3), config.model.embedding_size, tuple(config.model.widths),
      config.model.weight_decay, config.model.bn_momentum)


def load_embed_fn(config, workdir, saved_model):
  """(embed_fn, takes_uint8) from a SavedModel, or from the newest checkpoint in workdir."""
  if saved_model:
    if not os.path.isdir(saved_model):
      raise CheckpointError(f"SavedModel {saved_model} does not exist")
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    return (lambda images: serve(images=images)["embeddings"]), True
  model = build_embedding_model_from_config(config)
  logging.info("evaluating %s", train_loop.restore_model(model, workdir))
  return make_embed_fn(model), False


def main(argv):
  del argv
  config = _CONFIG.value
  eval_data = load_eval_data(config.data, config.seed, _WORKDIR.value)
  embed_fn, takes_uint8 = load_embed_fn(config, _WORKDIR.value, _SAVED_MODEL.value)
  paths = images_to_embed(eval_data)
  if not paths:
    raise ConfigError("nothing to evaluate: set data.eval_dir or data.pairs_file")
  if takes_uint8:
    dataset = data_lib.make_uint8_dataset(paths, config.data.load_size, config.data.eval_batch_size)
  else:
    dataset = data_lib.make_eval_dataset(paths, config.data.load_size, config.data.crop_size,
                                         config.data.normalization, config.data.eval_batch_size)
  results, roc = evaluate(embed_fn, dataset, paths, eval_data)
  if roc is not None:
    roc_png = _ROC_PNG.value or os.path.join(_WORKDIR.value, "roc.png")
    os.makedirs(os.path.dirname(os.path.abspath(roc_png)), exist_ok=True)
    results["roc_auc"] = metrics.area_under_curve(*roc)
    metrics.write_roc_png(roc_png, *roc, title="verification ROC")
    logging.info("ROC curve written to %s", roc_png)
  print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/triplet.py", "runs/triplet")
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel instead of a checkpoint.")
  _ROC_PNG = flags.DEFINE_string("roc_png", None, "Where to write the ROC curve; default <workdir>/roc.png.")
  cli.run(main)
