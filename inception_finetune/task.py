"""The Inception V4 fine-tuning task: `make_task(config, workdir)` assembles what the shared code needs.

Training and checkpoint evaluation take images that the input pipeline
preprocessed (TF-Slim's Inception preprocessing, [-1, 1]); the SavedModel takes
uint8 images of any size and preprocesses them inside its signature, so its
evaluation reads the decoded images instead.
"""
from absl import logging
import keras
import numpy as np
import tensorflow as tf

from common.app import export as export_lib
from common.contract import bounds
from common.contract import checks
from common.contract import task as task_lib
from common.contract.errors import ConfigError
from common.nn import optimizers
from common.training import calibration
from common.training import evaluation
from common.training import plots
from inception_finetune import data as data_lib
from inception_finetune import inception_v4
from inception_finetune import losses
from inception_finetune import metrics
from inception_finetune import preprocessing
from inception_finetune import slim_checkpoint

# The trainer's name (Task.name), which its SavedModel carries (assets/trainer.txt).
NAME = "inception_v4"
# Its config file's module, onto whose get_config() scripts/export.py reads a run's config.json.
CONFIG_MODULE = "configs.inception_v4"


def validate_config(config):
  """The fine-tuning sections' checks, the data section's by data.read_settings; returns the
  DataSettings."""
  blocks = len(inception_v4.BLOCK_NAMES)
  tops = [f"{inception_v4.SCOPE}/{name}" for name in inception_v4.BLOCK_NAMES] + list(inception_v4.HEAD_SCOPES)

  def known_scopes(value):
    # A scope is a prefix of variable names; one that matches none (a typo) would silently
    # freeze everything, or exclude nothing from the restore.
    return isinstance(value, str) and all(
        any(top.startswith(scope) or scope.startswith(top + "/") for top in tops)
        for scope in slim_checkpoint.parse_scopes(value))

  scopes = checks.Check(known_scopes, "comma-separated prefixes of Inception V4 variables "
                        f"({inception_v4.SCOPE}/<block>, {' or '.join(inception_v4.HEAD_SCOPES)}), or ''")
  checks.check_values(config, {
      "checkpoint_exclude_scopes": scopes,
      "trainable_scopes": scopes,
      "ignore_missing_vars": checks.BOOL,
      "label_smoothing": checks.FRACTION,
      "finetune.head_steps": checks.NON_NEGATIVE_INT,
      "finetune.learning_rate": checks.learning_rate(config.optimizer.allow_extreme_learning_rate),
      "finetune.unfreeze_last_blocks": checks.integer(
          -1, blocks, allowed=f"-1 (all blocks) or an integer in [0, {blocks}]"),
      "finetune.aux_loss_weight": checks.NON_NEGATIVE,
      "model.aux_logits": checks.BOOL,
      "model.dropout_rate": checks.FRACTION,
      "model.weight_decay": checks.NON_NEGATIVE,
      "model.batch_norm_decay": checks.FRACTION,
      "model.sync_batch_norm": checks.BOOL,
      "model.hidden_units": checks.NON_NEGATIVE_INT,  # 0 = no hidden layer
      "model.hidden_l2": checks.NON_NEGATIVE,
      "model.hidden_dropout_rate": checks.FRACTION,
      "model.logits_stddev": checks.NON_NEGATIVE,
  })
  bounds.check(config, {"model.hidden_units": bounds.CHANNELS})
  if config.finetune.head_steps > config.train.num_steps:
    raise ConfigError(f"finetune.head_steps={config.finetune.head_steps} must be in "
                      f"[0, train.num_steps={config.train.num_steps}]")
  # Against the model section, before read_settings: a size under the network's minimum (0 too) is named so.
  minimum = inception_v4.MIN_AUX_INPUT_SIZE if config.model.aux_logits else inception_v4.MIN_INPUT_SIZE
  if config.data.image_size < minimum:
    raise ConfigError(f"data.image_size={config.data.image_size} is below Inception V4's minimum "
                      f"{minimum}" + (" with model.aux_logits=True" if config.model.aux_logits else ""))
  return data_lib.read_settings(config.data)


# Training images whose BatchNorm statistics replace the moving ones of layers that started from
# random weights, in each checkpoint the run writes (in batches of train.batch_size).
CALIBRATION_IMAGES = 256


def build_model(config, settings, num_classes):
  """Inception V4 of the config's model section for the data settings' image size."""
  model_cfg = config.model
  size = settings.image_size
  return inception_v4.inception_v4(
      num_classes=num_classes, input_shape=(size, size, 3), aux_logits=model_cfg.aux_logits,
      dropout_rate=model_cfg.dropout_rate, weight_decay=model_cfg.weight_decay,
      hidden_units=model_cfg.hidden_units, hidden_l2=model_cfg.hidden_l2,
      hidden_dropout_rate=model_cfg.hidden_dropout_rate, logits_stddev=model_cfg.logits_stddev,
      batch_norm_decay=model_cfg.batch_norm_decay, sync_batch_norm=model_cfg.sync_batch_norm)


def unfrozen_scopes(config):
  """The scopes phase 2 trains: trainable_scopes and the last unfreeze_last_blocks blocks; [] = all."""
  head_scopes = slim_checkpoint.parse_scopes(config.trainable_scopes)
  blocks = config.finetune.unfreeze_last_blocks
  if blocks == -1 or not head_scopes:
    return []
  return head_scopes + inception_v4.block_scopes(blocks)


def fresh_batch_norm_layers(model, config):
  """The BatchNorm layers that start from random weights rather than the TF-Slim checkpoint.

  All of them without checkpoint_path; else those under checkpoint_exclude_scopes, and with
  ignore_missing_vars those the checkpoint lacks.
  """
  layers = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
  if not config.checkpoint_path:
    return layers
  excluded = slim_checkpoint.parse_scopes(config.checkpoint_exclude_scopes)
  restorable = None
  if config.ignore_missing_vars:
    path = slim_checkpoint.resolve_checkpoint(config.checkpoint_path)
    restorable = slim_checkpoint.read_variable_shapes(path)[1]

  def fresh(layer):
    name = inception_v4.slim_name(layer.moving_mean)
    return slim_checkpoint.in_scopes(name, excluded) or (restorable is not None and name not in restorable)

  return [layer for layer in layers if fresh(layer)]


def log_batch_norm_plan(model, config):
  """Says which BatchNorm layers the checkpoints hold recalibrated and which keep their decay."""
  fresh = fresh_batch_norm_layers(model, config)
  total = sum(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers)
  decay = config.model.batch_norm_decay
  if fresh:
    logging.warning(
        "BatchNorm: %d of %d layers start from random weights; each checkpoint holds the moving "
        "statistics of those being trained recomputed from %d training images, which every evaluation, "
        "prediction and export reads (moving averages at decay %s lag the weights by about %.0f "
        "steps)%s", len(fresh), total, CALIBRATION_IMAGES,
        decay, 1 / max(1 - decay, 1e-9),
        f"; the {total - len(fresh)} restored layers keep decay {decay}" if total > len(fresh) else "")
  else:
    logging.info("BatchNorm: all %d layers are restored and keep decay %s", total, decay)


def make_batch_norm_calibration(config, new_dataset):
  """calibrate(model): the BatchNorm layers that started from random weights and are trainable get
  moving statistics averaged over CALIBRATION_IMAGES training images, as training normalizes them.

  The moving averages of a decay near 1 (TF-Slim's 0.9997) stay near their initial values for
  thousands of steps while the weights move, so that an evaluation in inference mode scores a
  network that training never saw. Restored layers (good statistics) and frozen ones are left alone.
  new_dataset() gives the training batches from the start. The run calls it when it writes a
  checkpoint, which keeps the result (common/training/calibration.py) for every reader.
  """
  num_batches = -(-CALIBRATION_IMAGES // config.train.batch_size)
  traced = {}

  def calibrate(model):
    layers = [layer for layer in fresh_batch_norm_layers(model, config) if layer.trainable]
    if not layers:
      return
    statistics = [v for layer in layers for v in (layer.moving_mean, layer.moving_variance)]
    calibrated = {id(v) for v in statistics}
    kept = [(v, tf.identity(v)) for v in calibration.batch_norm_statistics(model)
            if id(v) not in calibrated]
    momenta = [layer.momentum for layer in layers]
    key = (id(model), tuple(layer.trainable for layer in model.layers))
    for layer in layers:
      layer.momentum = 0.0  # a training pass then writes its batch's statistics
      layer.moving_mean.assign(tf.zeros_like(layer.moving_mean))  # no NaN * 0 from a bad state
      layer.moving_variance.assign(tf.ones_like(layer.moving_variance))
    try:
      if key not in traced:
        @tf.function
        def accumulate(images, sums):
          model(images, training=True)
          return [total + v for total, v in zip(sums, statistics)]
        traced[key] = accumulate
      sums = [tf.zeros_like(v) for v in statistics]
      batches = iter(new_dataset())
      for _ in range(num_batches):
        sums = traced[key](next(batches)[0], sums)
      for variable, total in zip(statistics, sums):
        variable.assign(total / num_batches)
    finally:
      for layer, momentum in zip(layers, momenta):
        layer.momentum = momentum
      for variable, value in kept:  # restored trainable layers: no update from these passes
        variable.assign(value)

  return calibrate


def make_phases(config, model, mixed_precision):
  """Phase 1 trains trainable_scopes ("head"; "all layers" when they are empty, as in the scratch
  preset); phase 2 adds the last unfreeze_last_blocks base blocks ("unfrozen").

  Frozen layers' BatchNorm runs in inference mode, so their statistics stay those of the checkpoint.
  """
  head_scopes = slim_checkpoint.parse_scopes(config.trainable_scopes)
  last_scopes = unfrozen_scopes(config)
  head_steps = config.finetune.head_steps
  unfrozen_steps = config.train.num_steps - head_steps
  first = "head" if head_scopes else "all layers"
  head = task_lib.Phase(
      first, head_steps,
      optimizers.make_optimizer(config.optimizer, mixed_precision, head_steps, phase=first),
      prepare=lambda: slim_checkpoint.set_trainable_scopes(model, head_scopes),
      checkpoint_name="head")  # the first phase's, whatever it trains
  unfrozen = task_lib.Phase(
      "unfrozen", unfrozen_steps,
      optimizers.make_optimizer(config.optimizer, mixed_precision, unfrozen_steps,
                                learning_rate=config.finetune.learning_rate, phase="unfrozen"),
      prepare=lambda: slim_checkpoint.set_trainable_scopes(model, last_scopes))
  return [head, unfrozen]


def make_loss_fn(num_classes, label_smoothing, aux_loss_weight):
  def loss_fn(model, batch, training):
    images, labels = batch
    outputs = model(images, training=training)
    logits = inception_v4.main_logits(outputs)
    loss = losses.classification_loss(labels, logits, num_classes, label_smoothing)
    if isinstance(outputs, (list, tuple)):
      loss += aux_loss_weight * losses.classification_loss(labels, outputs[1], num_classes, label_smoothing)
    if labels.dtype.is_floating:  # mixed labels (mixup, CutMix): a hit is the larger share's class
      labels = tf.argmax(labels, axis=-1, output_type=tf.int32)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
    return loss, {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32))}
  return loss_fn


def make_predict_fn(model):
  """A compiled forward pass in inference mode returning the main logits in float32."""
  return tf.function(
      lambda images: tf.cast(inception_v4.main_logits(model(images, training=False)), tf.float32))


def saved_model_predict_fn(serve):
  """The SavedModel's log-probabilities, which rank like the logits and give the same cross-entropy."""
  return lambda images: tf.math.log(tf.maximum(serve(images=images)["probabilities"], 1e-30))


def image_summaries(model, batch, count):
  del model
  return {"inputs": (batch[0][:count] + 1.0) / 2.0}


def labelled(image, label, logits, class_names):
  """One evaluation image ([-1, 1] or the SavedModel's uint8) with its true and predicted class below."""
  predicted = int(np.argmax(logits))
  unit = image if image.dtype == np.uint8 else (image + 1.0) / 2.0
  return plots.captioned(plots.to_uint8(unit), [
      (f"true: {class_names[int(label)]}", "black"),
      (f"predicted: {class_names[predicted]}", "darkgreen" if predicted == int(label) else "red")])[None]


def evaluation_summaries(sampler, confusion, class_names):
  """The evaluation's TensorBoard images: a few labelled examples and the confusion matrix."""
  images = {f"examples/{i}": labelled(*example, class_names) for i, example in enumerate(sampler.examples)}
  images["confusion_matrix"] = plots.confusion_matrix_image(confusion, class_names)
  return images


def export_model(model, path, image_size, central_fraction, class_names):
  """SavedModel: uint8 images [B, H, W, 3] of any size -> class probabilities, ids and names (the
  names also as the asset assets/class_names.txt, a name per id).

  Images go through TF-Slim's evaluation preprocessing (central crop, legacy
  bilinear resize to image_size, [-1, 1]) inside the signature.
  """

  def serve(images):
    # The whole batch at once (its images have one size): no per-image loop for converters to lower.
    prepared = preprocessing.preprocess_for_eval(images, image_size, image_size, central_fraction)
    # Its size said to the graph (a crop of any image leaves it unknown there): LiteRT's converter
    # needs the channels of the network's input, for a model that takes any image size.
    prepared = tf.reshape(prepared, [-1, image_size, image_size, 3])
    logits = tf.cast(inception_v4.main_logits(model(prepared, training=False)), tf.float32)
    class_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {"probabilities": tf.nn.softmax(logits), "class_ids": class_ids,
            "class_names": tf.gather(tf.constant(class_names), class_ids)}

  return export_lib.export_saved_model(model, serve, path, [export_lib.UINT8_IMAGES], NAME, class_names)


def input_fingerprint(batch_size, settings, data):
  """What the checkpointed input position depends on: resuming with other values is refused."""
  return {"train.batch_size": batch_size, "data.image_size": settings.image_size,
          "data.shuffle_buffer": settings.source.shuffle_buffer,
          "data.oversample_to": settings.train.oversample_to,
          "train files": data.train_fingerprint,
          "train images": int(data.train_counts.sum())}


def make_task(config, workdir, for_training=True):
  """Checks the config, builds the datasets (synthetic images go to workdir; labels.txt is a run file) -> Task.

  An evaluation (for_training=False) checks only the evaluation images, with the run's classes; its Task
  has no training dataset and no calibration (the checkpoints hold its result).
  """
  settings = validate_config(config)
  data = data_lib.make_datasets(settings, config.train.batch_size, config.seed, workdir, for_training)

  def evaluate(predict, from_saved_model):
    sampler = evaluation.EvalSampler(data.raw_eval if from_saved_model else data.eval, predict,
                                    config.summaries.max_outputs)
    result = metrics.evaluate(sampler.predict, sampler.batches(), data.num_classes)
    return task_lib.Evaluation(
        dict(result.scalars(), **metrics.chance_top1(result.confusion, data.train_counts)),
        lambda directory: metrics.write_report(result, directory, data.class_names),
        lambda: evaluation_summaries(sampler, result.confusion, data.class_names))

  return task_lib.Task(
      name=NAME,
      train_dataset=data.train,
      eval_dataset=data.eval,
      build_model=lambda: build_model(config, settings, data.num_classes),
      make_phases=lambda model, mixed_precision: make_phases(config, model, mixed_precision),
      loss_fn=make_loss_fn(data.num_classes, config.label_smoothing, config.finetune.aux_loss_weight),
      make_predict_fn=make_predict_fn,
      evaluate=evaluate,
      saved_model_predict_fn=saved_model_predict_fn,
      export=lambda model, path: export_model(model, path, settings.image_size, settings.eval.central_fraction,
                                              data.class_names),
      describe=(f"{settings.source.source} data, {data.num_classes} classes, "
                f"{settings.image_size}x{settings.image_size}; "
                f"phases: head ({config.trainable_scopes}), unfrozen "
                f"(+{config.finetune.unfreeze_last_blocks} blocks)"),
      image_summaries_fn=image_summaries,
      input_fingerprint=input_fingerprint(config.train.batch_size, settings, data) if for_training else {},
      data_report=data.data_report,
      run_files=data.run_files,
      calibrate=make_batch_norm_calibration(config, data.new_train) if for_training else None,
      headline_metrics=("top1", "top5"))
