"""Trains the triplet embedding: `python -m triplet.train --config=configs/triplet.py`.

The recipe: config -> identities in P x K batches -> embedding CNN -> triplet
loss with online mining (or the softmax sanity check) -> the shared training
loop -> held-out evaluation -> a SavedModel from uint8 images to embeddings.
"""
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from common import cli
from common import export
from common import normalization
from common import train_loop
from common.errors import ConfigError
from triplet import data as data_lib
from triplet import evaluate as evaluate_lib
from triplet import losses
from triplet import model as model_lib

SOFTMAX = "softmax"
LOSS_NAMES = tuple(losses.LOSSES) + (SOFTMAX,)


def validate_config(config):
  data, loss = config.data, config.loss
  if loss.name not in LOSS_NAMES:
    raise ConfigError(f"loss.name='{loss.name}' is not one of {', '.join(LOSS_NAMES)}")
  if data.source not in ("synthetic", "folder"):
    raise ConfigError(f"data.source='{data.source}' is not one of synthetic, folder")
  if data.source == "folder" and not data.train_dir:
    raise ConfigError("data.source=folder needs data.train_dir (one directory per identity)")
  if data.small_identities not in data_lib.SMALL_IDENTITY_MODES:
    raise ConfigError(f"data.small_identities='{data.small_identities}' is not one of "
                      f"{', '.join(data_lib.SMALL_IDENTITY_MODES)}")
  if data.identities_per_batch < 2 or data.images_per_identity < 1:
    raise ConfigError(f"data.identities_per_batch={data.identities_per_batch} must be >= 2 and "
                      f"data.images_per_identity={data.images_per_identity} >= 1")
  if loss.name != SOFTMAX and data.images_per_identity < 2:
    raise ConfigError(f"loss.name={loss.name} needs data.images_per_identity >= 2 (anchor and positive)")
  if config.train.batch_size != data.identities_per_batch * data.images_per_identity:
    raise ConfigError(f"train.batch_size={config.train.batch_size} must be data.identities_per_batch "
                      f"x data.images_per_identity = {data.identities_per_batch * data.images_per_identity}")
  if not 0 < data.crop_size <= data.load_size:
    raise ConfigError(f"data.crop_size={data.crop_size} must be in 1..data.load_size={data.load_size}")
  normalization.get_normalizer(data.normalization)


def load_train_identities(config, workdir):
  """The training identities after the policy for identities with fewer than K images."""
  if config.data.source == "synthetic":
    root = evaluate_lib.prepare_synthetic(config.data, config.seed, workdir).train_dir
  else:
    root = config.data.train_dir
  identities = data_lib.list_identities(root, config.data.skip_bad_files)
  return data_lib.select_identities(identities, config.data.images_per_identity,
                                    config.data.small_identities)


def build_training_model(config, embedding_model, num_identities):
  if config.loss.name == SOFTMAX:
    return model_lib.build_classifier(embedding_model, num_identities, config.model.weight_decay)
  return model_lib.build_training_model(embedding_model)


def embedding_norm(outputs):
  """Mean norm of the embeddings before their normalization (it drifts when training goes wrong)."""
  return tf.reduce_mean(tf.norm(outputs[model_lib.RAW_EMBEDDING], axis=1))


def make_triplet_loss_fn(loss_name, margin, squared):
  loss = losses.LOSSES[loss_name]

  def loss_fn(model, batch, training):
    images, labels = batch
    outputs = model(images, training=training)
    value, statistics = loss(labels, outputs[model_lib.EMBEDDING], margin, squared)
    metrics = {f"mining/{name}": value for name, value in statistics.items()}
    metrics["embedding_norm"] = embedding_norm(outputs)
    return value, metrics

  return loss_fn


def softmax_loss_fn(model, batch, training):
  images, labels = batch
  outputs = model(images, training=training)
  logits = outputs[model_lib.LOGITS]
  value = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
  correct = tf.equal(tf.argmax(logits, axis=1, output_type=labels.dtype), labels)
  return value, {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32)),
                 "embedding_norm": embedding_norm(outputs)}


def make_classifier_accuracy_fn(classifier, identities, data_config):
  """Accuracy of the softmax head on the first K images of every training identity (center crops)."""
  k = data_config.images_per_identity
  paths = [path for identity in identities for path in identity.paths[:k]]
  labels = np.repeat(np.arange(len(identities)), [len(i.paths[:k]) for i in identities])
  dataset = data_lib.make_eval_dataset(paths, data_config.load_size, data_config.crop_size,
                                       data_config.normalization, data_config.eval_batch_size)
  predict = tf.function(lambda images: classifier(images, training=False)[model_lib.LOGITS],
                        reduce_retracing=True)

  def accuracy():
    logits = np.concatenate([predict(images).numpy() for images in dataset])
    return float(np.mean(np.argmax(logits, axis=1) == labels))

  return accuracy


def make_evaluate_fn(config, embedding_model, model, eval_data, identities):
  """Held-out retrieval and verification; in softmax mode also the classifier's training accuracy."""
  evaluate_embeddings = evaluate_lib.make_evaluate_fn(embedding_model, eval_data, config.data)
  if config.loss.name != SOFTMAX:
    return evaluate_embeddings
  classifier_accuracy = make_classifier_accuracy_fn(model, identities, config.data)
  return lambda m: dict(evaluate_embeddings(m), train_accuracy=classifier_accuracy())


def evaluate_before_training(evaluate_fn, model, workdir):
  """The metrics of the untrained model, computed once per workdir (a resumed run reads them back)."""
  path = os.path.join(workdir, "initial_eval.json")
  if not os.path.exists(path):
    if tf.train.latest_checkpoint(train_loop.checkpoint_dir(workdir)):
      return {}
    results = evaluate_fn(model)
    train_loop.write_json(path, results)
    logging.info("before training: %s", "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  with open(path) as f:
    return json.load(f)


def export_model(embedding_model, path, data_config):
  """SavedModel: uint8 images [B, H, W, 3] of any size -> {"embeddings": L2-normalized [B, D]}.

  Images get the evaluation preprocessing: resize to load_size, center crop, normalization.
  """
  normalizer = normalization.get_normalizer(data_config.normalization)

  def serve(images):
    images = tf.image.resize(images, [data_config.load_size, data_config.load_size])
    images = data_lib.preprocess_for_eval(images, data_config.crop_size, normalizer)
    return {"embeddings": embedding_model(images, training=False)}

  return export.export_saved_model(embedding_model, serve, path, [export.UINT8_IMAGES])


def describe(results, initial):
  final = results.get("eval", {})
  parts = [f"{name} {final[name]:.4f}" + (f" (before training {initial[name]:.4f})" if name in initial else "")
           for name in ("recall_at_1", "verification_accuracy", "train_accuracy") if name in final]
  return ", ".join(parts) or "no evaluation data"


def train_and_evaluate(config, workdir):
  """Trains, evaluates and exports; returns the final metrics, with "initial_eval" added."""
  validate_config(config)
  strategy = train_loop.prepare_run(config, workdir)
  identities = load_train_identities(config, workdir)
  data = config.data
  train_dataset = data_lib.make_train_dataset(
      identities, data.identities_per_batch, data.images_per_identity, data.load_size,
      data.crop_size, data.normalization, config.seed)
  eval_data = evaluate_lib.load_eval_data(data, config.seed, workdir)
  with strategy.scope():
    embedding_model = evaluate_lib.build_embedding_model_from_config(config)
    model = build_training_model(config, embedding_model, len(identities))
    optimizer = train_loop.make_optimizer(config.optimizer, config.mixed_precision)
  logging.info("model: %d parameters; loss %s", model.count_params(), config.loss.name)
  evaluate_fn = make_evaluate_fn(config, embedding_model, model, eval_data, identities)
  initial = evaluate_before_training(evaluate_fn, model, workdir)
  loss_fn = (softmax_loss_fn if config.loss.name == SOFTMAX else
             make_triplet_loss_fn(config.loss.name, config.loss.margin, config.loss.squared))
  results = train_loop.train(
      config, workdir, strategy=strategy, model=model, train_dataset=train_dataset, loss_fn=loss_fn,
      phases=[train_loop.Phase("train", config.train.num_steps, optimizer)], evaluate_fn=evaluate_fn)
  saved_model = export_model(embedding_model, os.path.join(workdir, "saved_model"), data)
  print(f"{describe(results, initial)} at step {results['step']}\n"
        f"outputs in {os.path.abspath(workdir)}: checkpoints/, train/ and eval/ (TensorBoard), "
        f"metrics.json, initial_eval.json, config.json, {os.path.basename(saved_model)}/", flush=True)
  return dict(results, initial_eval=initial)


def main(argv):
  del argv
  train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/triplet.py", "runs/triplet")
  cli.run(main)
