"""The segmentation task: `make_task(config, workdir)` assembles everything the shared code needs.

Images travel as uint8 from the files to the model, which normalizes them in
its first layer, so training, evaluation of a checkpoint, evaluation of the
SavedModel and prediction all take the same input.
"""
import numpy as np
import tensorflow as tf

from common import config as config_lib
from common import data as common_data
from common import export as export_lib
from common import normalization
from common import summaries
from common import task as task_lib
from common.errors import ConfigError
from segmentation import data as data_lib
from segmentation import losses
from segmentation import metrics
from segmentation import model as model_lib
from segmentation import visualize


def validate_config(config):
  """The segmentation sections' checks (data.py checks the data keys it reads: source, sizes, counts)."""
  config_lib.check_values(config, {
      "data.normalization": config_lib.one_of(*normalization.SCHEMES),
      "data.skip_bad_files": config_lib.BOOL,
      "data.class_names": config_lib.sequence_of(config_lib.STRING,
                                                 "a sequence of strings (() = the source's names)"),
      "data.npy_pixel_max": config_lib.POSITIVE,
      "model.widths": config_lib.POSITIVE_INTS,
      "model.weight_decay": config_lib.NON_NEGATIVE,
      "model.sync_batch_norm": config_lib.BOOL,
      "model.output_stride": config_lib.POSITIVE_INT,
      "loss.class_weights": config_lib.sequence_of(config_lib.NON_NEGATIVE,
                                                   "a sequence of numbers >= 0 (() = all 1)"),
  })
  stride = model_lib.total_stride(config.model.widths, config.model.output_stride)
  if config.data.patch_size % stride:
    raise ConfigError(f"data.patch_size={config.data.patch_size} is not divisible by the model's total "
                      f"stride {stride} (model.widths={tuple(config.model.widths)}, "
                      f"model.output_stride={config.model.output_stride})")
  weights = tuple(config.loss.class_weights)
  if weights and len(weights) != config.data.num_classes:
    raise ConfigError(f"loss.class_weights has {len(weights)} entries, data.num_classes is "
                      f"{config.data.num_classes}")
  if weights and not any(weights):
    raise ConfigError(f"loss.class_weights={weights} are all 0: the loss would be 0 and nothing would train")


def make_loss_fn(ignore_label, class_weights):
  def loss_fn(model, batch, training):
    images, labels = batch
    logits = model(images, training=training)
    return losses.pixel_cross_entropy(labels, logits, ignore_label, class_weights), {}
  return loss_fn


def make_predict_fn(model):
  """A compiled forward pass (uint8 images -> logits) that does not retrace for every image size."""
  return tf.function(lambda images: model(images, training=False), reduce_retracing=True)


def image_summaries(model, batch):
  images, labels = batch
  predictions = tf.argmax(model(images, training=False), axis=-1)
  return {"patches/image": images,
          "patches/label": visualize.colorize(labels.numpy()),
          "patches/prediction": visualize.colorize(predictions.numpy())}


def side_by_side(image, label, logits):
  """One evaluation image, its true classes and the predicted ones, side by side: [1, H, 3W+8, 3] uint8."""
  gap = np.full([image.shape[0], 4, 3], 255, np.uint8)
  return np.concatenate([image, gap, visualize.colorize(label), gap,
                         visualize.colorize(np.argmax(logits, axis=-1))], axis=1)[None]


def evaluation_summaries(sampler, confusion, class_names):
  """The evaluation's TensorBoard images: a few examples and the confusion matrix over all pixels."""
  images = {f"examples/{i}": side_by_side(*example) for i, example in enumerate(sampler.examples)}
  images["confusion_matrix"] = summaries.confusion_image(confusion, class_names)[None]
  return images


def export_model(model, path, pad_multiple):
  """SavedModel: uint8 images of any size -> per-pixel logits, probabilities and class ids."""

  def serve(images):
    height, width = tf.shape(images)[1], tf.shape(images)[2]
    logits = model(common_data.pad_to_multiple(images, pad_multiple, axis=1), training=False)
    logits = logits[:, :height, :width]
    return {"logits": logits, "probabilities": tf.nn.softmax(logits),
            "class_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

  return export_lib.export_saved_model(model, serve, path, [export_lib.UINT8_IMAGES])


def input_fingerprint(config, data):
  """What the checkpointed input position depends on: resuming with other values is refused."""
  cfg = config.data
  if data.train_files:
    files = [image for image, _ in data.train_files]
  elif cfg.source == "tfrecord":
    files = common_data.list_tfrecord_files(cfg.train_pattern)
  else:
    files = [cfg.train_images, cfg.train_labels]
  return {"train.batch_size": config.train.batch_size, "data.patch_size": cfg.patch_size,
          "data.patches_per_image": cfg.patches_per_image, "data.shuffle_buffer": cfg.shuffle_buffer,
          "train files": common_data.files_fingerprint(files), "train images": data.num_train_images}


def make_task(config, workdir):
  """Checks the config, builds the datasets (synthetic scenes are cached in workdir) -> Task."""
  validate_config(config)
  cfg = config.data
  pad_multiple = model_lib.total_stride(config.model.widths, config.model.output_stride)
  data = data_lib.make_datasets(cfg, config.train.batch_size, config.seed, pad_multiple, workdir)

  def evaluate(predict, from_saved_model):
    del from_saved_model  # the SavedModel takes the same uint8 images
    # Counted again beside metrics.evaluate's, which keeps only the metrics (a few ops a batch).
    confusion = np.zeros([data.num_classes, data.num_classes], np.int64)

    def count(labels, logits):
      confusion[...] += metrics.confusion_matrix(labels, logits, data.num_classes, cfg.ignore_label).numpy()

    sampler = summaries.EvalSampler(data.eval, predict, config.summaries.max_outputs, count)
    results = metrics.evaluate(sampler.predict, sampler.batches(), data.num_classes, cfg.ignore_label,
                               data.class_names)
    return task_lib.Evaluation(
        results, summary_images=lambda: evaluation_summaries(sampler, confusion, data.class_names))

  return task_lib.Task(
      name="segmentation",
      train_dataset=data.train,
      eval_dataset=data.eval,
      build_model=lambda: model_lib.build_model(data.num_classes, tuple(config.model.widths),
                                                config.model.weight_decay, cfg.normalization,
                                                config.model.sync_batch_norm, config.model.output_stride),
      make_phases=lambda model, mixed: task_lib.single_phase(config.train.num_steps, config.optimizer,
                                                             mixed),
      loss_fn=make_loss_fn(cfg.ignore_label, tuple(config.loss.class_weights) or None),
      make_predict_fn=make_predict_fn,
      evaluate=evaluate,
      saved_model_predict_fn=lambda serve: lambda images: serve(images=images)["logits"],
      export=lambda model, path: export_model(model, path, pad_multiple),
      describe=f"{cfg.source} data, {cfg.patch_size}x{cfg.patch_size} patches",
      image_summaries_fn=image_summaries,
      train_files=data.train_files,
      input_fingerprint=input_fingerprint(config, data),
      data_report=data.data_report)
