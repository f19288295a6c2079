"""The segmentation task: `make_task(config, workdir)` assembles everything the shared code needs.

Images travel as uint8 from the files to the model, which normalizes them in
its first layer, so training, evaluation of a checkpoint, evaluation of the
SavedModel and prediction all take the same input.
"""
import functools

import numpy as np
import tensorflow as tf

from common.app import export as export_lib
from common.contract import bounds
from common.contract import checks
from common.contract import task as task_lib
from common.contract.errors import ConfigError
from common.data import listing
from common.data import pipeline
from common.data import tfrecords
from common.nn import optimizers
from common.training import plots
from common.training import evaluation
from segmentation import data as data_lib
from segmentation import inference as inference_lib
from segmentation import losses
from segmentation import metrics
from segmentation import model as model_lib
from segmentation import overlays
from segmentation import visualize

# The trainer's name (Task.name), which its SavedModel carries (assets/trainer.txt).
NAME = "segmentation"
# Its config file's module, onto whose get_config() scripts/export.py reads a run's config.json.
CONFIG_MODULE = "configs.segmentation"


REPORT_OVERLAYS = 4  # evaluation images drawn with their truth and prediction in the report


def validate_config(config, for_training=True):
  """The segmentation sections' checks -> (the data settings, the evaluation's Inference), read once
  (data.read_settings checks every data value; for_training=False: an evaluation's, without the
  training files' keys)."""
  settings = data_lib.read_settings(config.data, for_training)
  inference = inference_lib.read_inference(config, settings.eval.eval_max_pixels)
  checks.check_values(config, {
      "model.widths": checks.POSITIVE_INTS,
      "model.weight_decay": checks.NON_NEGATIVE,
      "model.sync_batch_norm": checks.BOOL,
      "model.output_stride": checks.POSITIVE_INT,
      "model.context_rates": checks.sequence_of(checks.POSITIVE_INT, "a sequence of dilation rates >= 1 (() = off)"),
      "loss.class_weights": checks.sequence_of(checks.NON_NEGATIVE,
                                               "a sequence of numbers >= 0 (() = all 1)"),
      "loss.cross_entropy_weight": checks.NON_NEGATIVE,
      "loss.ohem": checks.BOOL,
      "loss.ohem_threshold": checks.number(0, 1),
      "loss.ohem_min_kept": checks.NON_NEGATIVE_INT,
      "loss.dice_weight": checks.NON_NEGATIVE,
      "loss.lovasz_weight": checks.NON_NEGATIVE,
      "eval.overlays_every": checks.NON_NEGATIVE_INT,  # 0 = off
  })
  patch_size = settings.train.patch_size
  bounds.check(config, {"model.widths": bounds.CHANNELS, "eval.overlays_every": bounds.STEPS,
                        "model.context_rates": (64, "past 64 cells a dilated 3x3 convolution reaches beyond a "
                                                "4096-px image at stride 32 and sees only padding"),
                        "loss.ohem_min_kept": (
      patch_size ** 2, "the pixels of a patch (data.patch_size squared), of which it keeps the hardest")})
  stride = model_lib.total_stride(config.model.widths, config.model.output_stride)
  if patch_size % stride:
    raise ConfigError(f"data.patch_size={patch_size} is not divisible by the model's total "
                      f"stride {stride} (model.widths={tuple(config.model.widths)}, "
                      f"model.output_stride={config.model.output_stride})")
  weights = tuple(config.loss.class_weights)
  if weights and len(weights) != settings.source.num_classes:
    raise ConfigError(f"loss.class_weights has {len(weights)} entries, data.num_classes is "
                      f"{settings.source.num_classes}")
  if weights and not any(weights):
    raise ConfigError(f"loss.class_weights={weights} are all 0: the loss would be 0 and nothing would train")
  loss = config.loss
  if not (loss.cross_entropy_weight or loss.dice_weight or loss.lovasz_weight):
    raise ConfigError(f"loss.cross_entropy_weight={loss.cross_entropy_weight}, loss.dice_weight="
                      f"{loss.dice_weight} and loss.lovasz_weight={loss.lovasz_weight} are all 0: the loss "
                      "would be 0 and nothing would train")
  if loss.ohem and not (loss.ohem_threshold or loss.ohem_min_kept):
    raise ConfigError("loss.ohem_threshold=0 and loss.ohem_min_kept=0 keep no pixel: online hard-example "
                      "mining needs one of them above 0")
  return settings, inference


def make_loss_fn(ignore_label, loss_cfg):
  """The loss section's terms (segmentation/losses.py), weighted and summed; with more than one term,
  each is also a training scalar (loss_<term>)."""
  class_weights = tuple(loss_cfg.class_weights) or None
  cross_entropy = losses.pixel_cross_entropy
  if loss_cfg.ohem:
    cross_entropy = functools.partial(losses.ohem_cross_entropy, threshold=loss_cfg.ohem_threshold,
                                      min_kept=loss_cfg.ohem_min_kept)
  terms = {name: (weight, fn) for name, weight, fn in (
      ("cross_entropy", loss_cfg.cross_entropy_weight, cross_entropy),
      ("dice", loss_cfg.dice_weight, losses.dice_loss),
      ("lovasz", loss_cfg.lovasz_weight, losses.lovasz_softmax)) if weight}

  def loss_fn(model, batch, training):
    images, labels = batch
    logits = model(images, training=training)
    values = {name: fn(labels, logits, ignore_label, class_weights=class_weights)
              for name, (_, fn) in terms.items()}
    loss = tf.add_n([weight * values[name] for name, (weight, _) in terms.items()])
    return loss, {f"loss_{name}": value for name, value in values.items()} if len(values) > 1 else {}
  return loss_fn


def make_predict_fn(forward, inference):
  """A compiled predict (uint8 images -> logits, inference_lib.image_logits around forward, a function
  of uint8 images of any size) that does not retrace for every image size."""
  return tf.function(lambda images: inference_lib.image_logits(forward, images, inference), reduce_retracing=True)


def make_image_summaries(class_names, ignore_label):
  """image_summaries(model, batch): each training patch beside its truth and prediction
  (visualize.figure), over one legend of the batch's classes, so that the patches stack."""
  def image_summaries(model, batch, count):
    images, labels = (tensor[:count] for tensor in batch)
    labels, predictions = labels.numpy(), tf.argmax(model(images, training=False), axis=-1).numpy()
    legend = np.union1d(np.unique(labels), np.unique(predictions))
    return {"patches": np.stack([
        np.asarray(visualize.figure(image, {"truth": label, "prediction": predicted}, class_names,
                                    ignore_label, legend, plots.TENSORBOARD_BOX[0]))
        for image, label, predicted in zip(images.numpy(), labels, predictions)])}
  return image_summaries


def evaluation_summaries(examples, confusion, class_names, ignore_label):
  """The evaluation's TensorBoard images: a few examples (as the report's overlays) and the
  confusion matrix over all pixels."""
  images = {f"examples/{i}": np.asarray(visualize.figure(
      image, {"truth": label, "prediction": np.argmax(logits, axis=-1)}, class_names, ignore_label,
      width=plots.TENSORBOARD_BOX[0]))[None]
      for i, (image, label, logits) in enumerate(examples)}
  images["confusion_matrix"] = plots.confusion_matrix_image(confusion, class_names, metrics.confusion_title(confusion),
                                                            fractions_in_cells=True)
  return images


def build_model(config, settings):
  """The network of the config's model section for the data settings' classes and normalization."""
  return model_lib.build_model(settings.source.num_classes, tuple(config.model.widths), config.model.weight_decay,
                               settings.normalization, config.model.sync_batch_norm,
                               config.model.output_stride, tuple(config.model.context_rates))


def pad_multiple(config):
  """Image sides must be a multiple of the model's total stride: the SavedModel and predict pad to it."""
  return model_lib.total_stride(config.model.widths, config.model.output_stride)


def whole_image_logits(model, images, multiple):
  """Logits of uint8 images of any size: padded to the stride's multiple, cropped back."""
  height, width = tf.shape(images)[1], tf.shape(images)[2]
  return model(pipeline.pad_to_multiple(images, multiple), training=False)[:, :height, :width]


def model_forward(model, multiple):
  """forward(images) of a model: its logits of uint8 images of any size (whole_image_logits)."""
  return lambda images: whole_image_logits(model, images, multiple)


def export_model(model, path, multiple, class_names):
  """SavedModel: uint8 images of any size -> per-pixel logits, probabilities and class ids, and the
  class names (a name per id, also the asset assets/class_names.txt)."""

  def serve(images):
    logits = whole_image_logits(model, images, multiple)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits),
            "class_ids": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "class_names": tf.constant(class_names)}

  return export_lib.export_saved_model(model, serve, path, [export_lib.UINT8_IMAGES], NAME, class_names)


def input_fingerprint(settings, batch_size, data):
  """What the checkpointed input position depends on: resuming with other values is refused."""
  source, train = settings.source, settings.train
  if data.train_fingerprint:  # the source's own (TFDS)
    files = data.train_fingerprint
  elif data.train_files:
    files = listing.files_fingerprint([image for image, _ in data.train_files])
  elif source.source == "tfrecord":
    files = listing.files_fingerprint(tfrecords.list_tfrecord_files(source.train_pattern))
  else:
    files = listing.files_fingerprint([source.train_images, source.train_labels])
  return {"train.batch_size": batch_size, "data.patch_size": train.patch_size,
          "data.patches_per_image": train.patches_per_image, "data.shuffle_buffer": train.shuffle_buffer,
          "train files": files, "train images": data.num_train_images}


def make_task(config, workdir, for_training=True):
  """Checks the config, builds the datasets (synthetic scenes are cached in workdir) -> Task.

  An evaluation (for_training=False) lists and checks only the evaluation files, and its Task has no
  training dataset.
  """
  settings, inference = validate_config(config, for_training)  # every value checked before any file is listed
  multiple = pad_multiple(config)
  data = data_lib.make_datasets(settings, config.train.batch_size, config.seed, workdir, for_training,
                                tiled=bool(inference.window))

  class_names = data.class_names or tuple(str(c) for c in range(data.num_classes))  # ids, without names

  def evaluate(predict, from_saved_model):
    del from_saved_model  # the SavedModel takes the same uint8 images
    sampler = evaluation.EvalSampler(data.eval, predict, max(config.summaries.max_outputs, REPORT_OVERLAYS))
    confusion = metrics.evaluate(sampler.predict, sampler.batches(), data.num_classes, settings.source.ignore_label)
    examples = sampler.examples
    return task_lib.Evaluation(
        metrics.metrics_from_confusion(confusion, data.class_names),
        lambda directory: metrics.write_report(directory, confusion, class_names, examples[:REPORT_OVERLAYS],
                                               settings.source.ignore_label),
        lambda: evaluation_summaries(examples[:config.summaries.max_outputs], confusion, class_names,
                                     settings.source.ignore_label))

  return task_lib.Task(
      name=NAME,
      train_dataset=data.train,
      eval_dataset=data.eval,
      build_model=lambda: build_model(config, settings),
      make_phases=lambda model, mixed: optimizers.single_phase(config.train.num_steps, config.optimizer,
                                                             mixed),
      loss_fn=make_loss_fn(settings.source.ignore_label, config.loss),
      make_predict_fn=lambda model: make_predict_fn(model_forward(model, multiple), inference),
      evaluate=evaluate,
      # Eager: scripts/export.py passes its runtimes' stand-ins for the signature (ONNX, LiteRT).
      saved_model_predict_fn=lambda serve: functools.partial(
          inference_lib.image_logits, lambda images: serve(images=images)["logits"], inference=inference),
      export=lambda model, path: export_model(model, path, multiple, class_names),
      describe=f"{settings.source.source} data, {settings.train.patch_size}x{settings.train.patch_size} patches",
      image_summaries_fn=make_image_summaries(class_names, settings.source.ignore_label),
      train_files=data.train_files,
      input_fingerprint=input_fingerprint(settings, config.train.batch_size, data) if for_training else {},
      data_report=data.data_report,
      headline_metrics=("miou", "pixel_accuracy"),
      make_actions=lambda model, summaries: overlays.make_overlay_actions(
          config.eval.overlays_every, data.eval, config.summaries.max_outputs,
          make_predict_fn(model_forward(model, multiple), inference), class_names, settings.source.ignore_label,
          summaries.train))
