"""Fine-tunes TF-Slim's Inception V4: `python -m inception_finetune.train --config=configs/inception_v4.py
--config.checkpoint_path=.../inception_v4.ckpt`.

The recipe: config -> data -> model -> restore the TF-Slim checkpoint (its head
excluded) -> phase 1 trains the new head (trainable_scopes) -> phase 2 unfreezes
the last base blocks at a lower learning rate -> evaluation report -> SavedModel.
Frozen layers' BatchNorm runs in inference mode, so their statistics stay those
of the checkpoint.
"""
import os

from absl import logging
import tensorflow as tf

from common import cli
from common import train_loop
from common.errors import ConfigError
from common.errors import DataError
from inception_finetune import data as data_lib
from inception_finetune import evaluate as evaluate_lib
from inception_finetune import inception_v4
from inception_finetune import slim_checkpoint


def validate_config(config):
  if not 0 <= config.finetune.head_steps <= config.train.num_steps:
    raise ConfigError(f"finetune.head_steps={config.finetune.head_steps} must be in "
                      f"[0, train.num_steps={config.train.num_steps}]")
  if not 0 <= config.label_smoothing < 1:
    raise ConfigError(f"label_smoothing={config.label_smoothing} must be in [0, 1)")
  if config.finetune.unfreeze_last_blocks != -1:
    inception_v4.block_scopes(config.finetune.unfreeze_last_blocks)  # raises for a bad count
  minimum = inception_v4.MIN_AUX_INPUT_SIZE if config.model.aux_logits else inception_v4.MIN_INPUT_SIZE
  if config.data.image_size < minimum:
    raise ConfigError(f"data.image_size={config.data.image_size} is below Inception V4's minimum "
                      f"{minimum}" + (" with model.aux_logits=True" if config.model.aux_logits else ""))


def build_model(config, num_classes):
  model_cfg = config.model
  size = config.data.image_size
  return inception_v4.inception_v4(
      num_classes=num_classes, input_shape=(size, size, 3), aux_logits=model_cfg.aux_logits,
      dropout_rate=model_cfg.dropout_rate, weight_decay=model_cfg.weight_decay,
      hidden_units=model_cfg.hidden_units, hidden_l2=model_cfg.hidden_l2,
      hidden_dropout_rate=model_cfg.hidden_dropout_rate, logits_stddev=model_cfg.logits_stddev,
      batch_norm_decay=model_cfg.batch_norm_decay)


def choose_start(config, workdir):
  """Says which weights the run starts from; returns the TF-Slim checkpoint to restore, or None.

  A checkpoint in the workdir wins (the run resumes), and the log says so
  plainly: TF-Slim silently preferring a stale train_dir confused its users.
  """
  resume = tf.train.latest_checkpoint(train_loop.checkpoint_dir(workdir))
  if resume:
    logging.warning("STARTING FROM %s (resuming this workdir); checkpoint_path %s is not read",
                    resume, config.checkpoint_path or "(unset)")
    return None
  if not config.checkpoint_path:
    logging.warning("STARTING FROM RANDOM WEIGHTS: checkpoint_path is empty")
    return None
  # Checked before the data and model are built, so that a wrong path fails in seconds.
  path = slim_checkpoint.check_slim_checkpoint(config.checkpoint_path)
  logging.info("STARTING FROM the TF-Slim checkpoint %s", path)
  return path


def make_phases(config, model):
  """Phase 1 trains trainable_scopes; phase 2 adds the last unfreeze_last_blocks base blocks."""
  head_scopes = slim_checkpoint.parse_scopes(config.trainable_scopes)
  blocks = config.finetune.unfreeze_last_blocks
  if blocks == -1 or not head_scopes:
    unfrozen_scopes = []  # everything
  else:
    unfrozen_scopes = head_scopes + inception_v4.block_scopes(blocks)
  head = train_loop.Phase(
      "head", config.finetune.head_steps,
      train_loop.make_optimizer(config.optimizer, config.mixed_precision),
      prepare=lambda: slim_checkpoint.set_trainable_scopes(model, head_scopes))
  unfrozen = train_loop.Phase(
      "unfrozen", config.train.num_steps - config.finetune.head_steps,
      train_loop.make_optimizer(config.optimizer, config.mixed_precision,
                                learning_rate=config.finetune.learning_rate),
      prepare=lambda: slim_checkpoint.set_trainable_scopes(model, unfrozen_scopes))
  return [head, unfrozen]


def sparse_classification_loss(labels, logits, num_classes, label_smoothing=0.0):
  """Mean softmax cross-entropy of integer class ids [B], with TF-Slim's label smoothing."""
  if labels.shape.rank != 1:
    raise DataError(f"labels have shape {labels.shape}: the sparse loss takes one integer class id "
                    "per image (shape [batch]), not one-hot or multi-label vectors")
  if labels.dtype.is_floating:
    raise DataError(f"labels are {labels.dtype.name}: the sparse loss takes integer class ids")
  # The data was checked up front; on a GPU an out-of-range id would give NaN, not an error.
  tf.debugging.assert_non_negative(labels, message="negative label")
  tf.debugging.assert_less(labels, tf.cast(num_classes, labels.dtype), message="label >= num_classes")
  logits = tf.cast(logits, tf.float32)
  targets = tf.one_hot(labels, num_classes)
  if label_smoothing:
    targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
  return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits))


def make_loss_fn(num_classes, label_smoothing, aux_loss_weight):
  def loss_fn(model, batch, training):
    images, labels = batch
    outputs = model(images, training=training)
    logits = evaluate_lib.main_logits(outputs)
    loss = sparse_classification_loss(labels, logits, num_classes, label_smoothing)
    if isinstance(outputs, (list, tuple)):
      loss += aux_loss_weight * sparse_classification_loss(labels, outputs[1], num_classes,
                                                           label_smoothing)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
    return loss, {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32))}
  return loss_fn


def make_image_summaries(model, batch):
  del model
  images, _ = batch
  return {"inputs": (images + 1.0) / 2.0}


def train_and_evaluate(config, workdir):
  """Fine-tunes, evaluates and exports; returns the final metrics (also in workdir/metrics.json)."""
  validate_config(config)
  slim_path = choose_start(config, workdir)
  strategy = train_loop.prepare_run(config, workdir)
  data = data_lib.make_datasets(config.data, config.train.batch_size, config.seed, workdir)
  with strategy.scope():
    model = build_model(config, data.num_classes)
    if slim_path:
      slim_checkpoint.restore(model, slim_path, config.checkpoint_exclude_scopes,
                              config.ignore_missing_vars)
    phases = make_phases(config, model)
  predict_fn = evaluate_lib.make_predict_fn(model)
  evaluations = []  # the loop always evaluates the final weights; their result makes the report

  def evaluate_fn(_):
    evaluations.append(evaluate_lib.evaluate(predict_fn, data.eval, data.num_classes))
    return evaluations[-1].scalars()

  results = train_loop.train(
      config, workdir, strategy=strategy, model=model, train_dataset=data.train,
      loss_fn=make_loss_fn(data.num_classes, config.label_smoothing, config.finetune.aux_loss_weight),
      phases=phases,
      evaluate_fn=evaluate_fn, image_summaries_fn=make_image_summaries)
  final = evaluations[-1]
  report_dir = evaluate_lib.write_report(final, os.path.join(workdir, "eval"), data.class_names)
  saved_model = evaluate_lib.export_model(model, os.path.join(workdir, "saved_model"),
                                          config.data.image_size, config.data.central_fraction)
  print(f"eval top-1 {final.top1:.4f}, top-5 {final.top5:.4f} at step {results['step']}\n"
        f"outputs in {os.path.abspath(workdir)}: checkpoints/, train/ and eval/ (TensorBoard), "
        f"{os.path.relpath(report_dir, workdir)}/ (confusion matrix, per-class accuracy), "
        f"metrics.json, labels.txt, {os.path.basename(saved_model)}/", flush=True)
  return results


def main(argv):
  del argv
  train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/inception_v4.py", "runs/inception_v4")
  cli.run(main)
