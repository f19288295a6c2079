"""The triplet task: `make_task(config, workdir)` assembles everything the shared code needs.

The model that trains is the embedding CNN with its embedding before
normalization as a second output (a training statistic), or, in the softmax
sanity mode, a classifier around it; evaluation, prediction and the
SavedModel use the embedding network inside it.
"""
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from common.app import export as export_lib
from common.contract import bounds
from common.contract import checks
from common.contract import config as config_lib
from common.contract import task as task_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import listing
from common.data import normalization
from common.nn import optimizers
from common.training import plots
from common.training import summaries
from triplet import data as data_lib
from triplet import input_pipeline
from triplet import losses
from triplet import metrics
from triplet import model as model_lib
from triplet import sources as sources_lib

# The trainer's name (Task.name), which its SavedModel carries (assets/trainer.txt).
NAME = "triplet"
# Its config file's module, onto whose get_config() scripts/export.py reads a run's config.json.
CONFIG_MODULE = "configs.triplet"

SOFTMAX = "softmax"
LOSS_NAMES = tuple(losses.LOSSES) + (SOFTMAX,)
ROC_PNG = "roc.png"
VERIFICATION_THRESHOLD = "verification_threshold"  # the metric: the distance below which a pair is the same
INITIAL_ROC = "initial_roc.json"  # the ROC curves of the untrained network and of raw pixels


def validate_config(config, for_training=True):
  """The triplet sections' checks (the data section's by data.read_settings; sources.py checks the
  folders and pairs it reads); an evaluation (for_training=False) skips those of the training
  batches. Returns the DataSettings."""
  loss = config.loss
  checks.check_values(config, {
      "loss.name": checks.one_of(*LOSS_NAMES),
      "loss.margin": checks.NON_NEGATIVE,  # below 0 every triplet already satisfies it: nothing trains
      "loss.squared": checks.BOOL,
      "loss.cross_replica_mining": checks.BOOL,
  })
  settings = data_lib.read_settings(config.data)
  checks.check_values(config, {
      "model.embedding_size": checks.POSITIVE_INT,
      "model.widths": checks.POSITIVE_INTS,
      "model.weight_decay": checks.NON_NEGATIVE,
      "model.bn_momentum": checks.FRACTION,
      "model.sync_batch_norm": checks.BOOL,
      "summaries.max_projector_points": checks.integer(0, summaries.MAX_PROJECTOR_POINTS),
  })
  bounds.check(config, {"model.embedding_size": bounds.CHANNELS, "model.widths": bounds.CHANNELS,
                        "loss.margin": (4, "the largest squared distance of two L2-normalized embeddings: "
                                        "no triplet could meet a larger margin")})
  if not for_training:
    return settings
  p, k = settings.train.identities_per_batch, settings.train.images_per_identity
  if loss.name != SOFTMAX and k < 2:
    raise ConfigError(f"loss.name={loss.name} needs data.images_per_identity >= 2 (anchor and positive)")
  if config.train.batch_size != p * k:
    raise ConfigError(f"train.batch_size={config.train.batch_size} must be data.identities_per_batch "
                      f"x data.images_per_identity = {p * k}")
  return settings


def fall_back_best_metric(config, eval_data):
  """The presets' train.best_metric=verification_accuracy needs verification pairs: without them
  the run keeps the weights of the best recall_at_1 on the held-out identities instead, or, with
  no retrieval either, the last weights (""). Said in one line before training, rather than
  refused at the first evaluation, after training time was spent."""
  if config.train.best_metric != "verification_accuracy" or eval_data.pairs:
    return
  fallback = "recall_at_1" if metrics.has_retrieval(eval_data) else ""
  logging.warning("train.best_metric=verification_accuracy needs verification pairs (data.pairs_file): "
                  "keeping %s instead", f"the best {fallback}'s weights" if fallback else "the last weights")
  config.train.best_metric = fallback


def build_model(config, settings, num_identities):
  """The training model: the embedding CNN of the data settings' crops, around which softmax mode
  puts a classifier head."""
  crop = settings.images.crop_size
  embedding_model = model_lib.build_embedding_model(
      (crop, crop, 3), config.model.embedding_size, tuple(config.model.widths),
      config.model.weight_decay, config.model.bn_momentum, config.model.sync_batch_norm)
  if config.loss.name == SOFTMAX:
    return model_lib.build_classifier(embedding_model, num_identities, config.model.weight_decay)
  return model_lib.build_training_model(embedding_model)


def embedding_norm(outputs):
  """Mean norm of the embeddings before their normalization (it drifts when training goes wrong)."""
  return tf.reduce_mean(tf.norm(outputs[model_lib.RAW_EMBEDDING], axis=1))


def make_triplet_loss_fn(loss_name, margin, squared, cross_replica_mining):
  """cross_replica_mining: with several replicas, mine over the global batch (losses.gather_replicas)."""
  loss = losses.LOSSES[loss_name]

  def loss_fn(model, batch, training):
    images, labels = batch
    outputs = model(images, training=training)
    embeddings = outputs[model_lib.EMBEDDING]
    # Decided while tracing: only a replica function of several replicas gathers (None: cross-replica).
    context = tf.distribute.get_replica_context()
    if cross_replica_mining and context is not None and context.num_replicas_in_sync > 1:
      labels, embeddings = losses.gather_replicas(labels, embeddings)
    value, statistics = loss(labels, embeddings, margin, squared)
    scalars = {f"mining/{name}": value for name, value in statistics.items()}
    scalars["embedding_norm"] = embedding_norm(outputs)
    return value, scalars

  return loss_fn


def softmax_loss_fn(model, batch, training):
  images, labels = batch
  outputs = model(images, training=training)
  logits = outputs[model_lib.LOGITS]
  value = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
  correct = tf.equal(tf.argmax(logits, axis=1, output_type=labels.dtype), labels)
  return value, {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32)),
                 "embedding_norm": embedding_norm(outputs)}


def triplet_images(model, batch, count):
  """The training batch's hardest triplets as images: per identity, its first image (the anchor), its
  farthest image of the same identity and its nearest image of another side by side, the
  distances below (red where the negative is the nearer: that anchor would be matched wrongly)."""
  images, labels = batch
  embeddings = model(images, training=False)[model_lib.EMBEDDING]
  anchors, positives, negatives, positive_distances, negative_distances = metrics.hardest_triplets(
      embeddings.numpy(), labels.numpy())
  _, first = np.unique(labels.numpy()[anchors], return_index=True)  # one anchor per identity
  images = images.numpy()
  low, high = images.min(axis=(1, 2, 3), keepdims=True), images.max(axis=(1, 2, 3), keepdims=True)
  shown = plots.to_uint8((images - low) / np.maximum(high - low, 1e-6))  # any normalization
  gap = np.full([shown.shape[1], 2, 3], 255, np.uint8)
  drawn = []
  for k in sorted(first)[:count]:
    row = np.concatenate([shown[anchors[k]], gap, shown[positives[k]], gap, shown[negatives[k]]], axis=1)
    wrong = negative_distances[k] < positive_distances[k]
    drawn.append(plots.captioned(row, [
        ("anchor | farthest same identity | nearest other", "black"),
        (f"distance: same {positive_distances[k]:.3f}, other {negative_distances[k]:.3f}"
         + (": other nearer" if wrong else ""), "red" if wrong else "darkgreen")]))
  return {"hardest_triplets": np.stack(drawn)} if drawn else {}


def make_predict_fn(model):
  """A compiled pass from normalized crops to embeddings that does not retrace for a smaller last batch."""
  embedding_model = model_lib.embedding_part(model)
  return tf.function(lambda images: embedding_model(images, training=False), reduce_retracing=True)


def make_classifier_accuracy_fn(classifier, identities, settings):
  """Accuracy of the softmax head on the first K images of every training identity (center crops)."""
  k = settings.train.images_per_identity
  paths = [path for identity in identities for path in identity.paths[:k]]
  labels = np.repeat(np.arange(len(identities)), [len(i.paths[:k]) for i in identities])
  dataset = input_pipeline.make_eval_dataset(paths, settings.images.load_size, settings.images.crop_size,
                                       settings.images.normalization, settings.eval.eval_batch_size)
  predict = tf.function(lambda images: classifier(images, training=False)[model_lib.LOGITS],
                        reduce_retracing=True)

  def accuracy():
    logits = np.concatenate([predict(images).numpy() for images in dataset])
    return {"train_accuracy": float(np.mean(np.argmax(logits, axis=1) == labels))}

  return accuracy


def export_model(model, path, settings, threshold=None):
  """SavedModel: uint8 images [B, H, W, 3] of any size -> {"embeddings": L2-normalized [B, D]}.

  Images get the evaluation preprocessing: resize to load_size, center crop,
  normalization. Only the embedding network is saved (no classifier head). threshold: {"threshold",
  "step"} (export_threshold), carried by the signature "constants" (common/app/export.py).
  """
  embedding_model = model_lib.embedding_part(model)
  normalizer = normalization.get_normalizer(settings.images.normalization)

  def serve(images):
    images = tf.image.resize(images, [settings.images.load_size, settings.images.load_size])
    images = input_pipeline.preprocess_for_eval(images, settings.images.crop_size, normalizer)
    return {"embeddings": embedding_model(images, training=False)}

  return export_lib.export_saved_model(embedding_model, serve, path, [export_lib.UINT8_IMAGES], NAME,
                                       constants=threshold)


def export_threshold(model, evaluate, workdir):
  """{"threshold": the verification threshold of the weights `model` holds, "step": theirs} for the
  export, or None without verification pairs. The weights are the best evaluation's (metrics.json's
  "best" names its step) or the last; the pairs are scored again, as the threshold of the best
  evaluation is not recorded."""
  results = evaluate(make_predict_fn(model), False).metrics
  if VERIFICATION_THRESHOLD not in results:
    return None
  step = _weights_step(workdir)
  logging.info("the export carries the verification threshold %.4f of its weights (step %d)",
               results[VERIFICATION_THRESHOLD], step)
  return {"threshold": float(results[VERIFICATION_THRESHOLD]), "step": step}


def _weights_step(workdir):
  """The step of the weights an export holds, from the run's metrics.json ("best", else the last
  step); -1 when it does not say: missing (a worker other than the chief, whose export is not kept)
  or, with a warning, unreadable or of other types (an edited file; scripts/export.py reads it)."""
  path = os.path.join(workdir, "metrics.json")
  if not os.path.lexists(path):
    return -1
  fix = "the export's threshold carries no step (-1)"
  try:
    record = config_lib.read_json_object(path, fix)
    key, step = ("best.step", record["best"].get("step")) if isinstance(record.get("best"), dict) else (
        "step", record.get("step"))
    if isinstance(step, bool) or not isinstance(step, int):
      raise DataError(f"{path}: {key} is {json.dumps(step)}, not a step; {fix}")
  except DataError as e:
    logging.warning("%s", e)
    return -1
  return step


def projector_points(paths, load_size, batch_size):
  """embeddings_of({path: embedding}) -> an Evaluation's embeddings() (common/contract/task.py) for
  TensorBoard's Projector: the embeddings of `paths`, each image's identity (its folder) and file,
  and its thumbnail, the file read at thumbnail size once, at the first evaluation that writes them."""
  metadata = {"identity": [os.path.basename(os.path.dirname(path)) for path in paths], "file": paths}
  thumbnails = []

  def embeddings_of(embeddings):
    def points():
      if not thumbnails:
        dataset = input_pipeline.make_uint8_dataset(paths, min(load_size, summaries.THUMBNAIL_SIZE), batch_size)
        thumbnails.append(np.concatenate(list(dataset.as_numpy_iterator())))
      return np.stack([embeddings[path] for path in paths]).astype(np.float32), metadata, thumbnails[0]
    return points

  return embeddings_of


def input_fingerprint(settings, identities):
  """What the checkpointed input position depends on: resuming with other values is refused."""
  return {"data.identities_per_batch": settings.train.identities_per_batch,
          "data.images_per_identity": settings.train.images_per_identity, "data.load_size": settings.images.load_size,
          "data.crop_size": settings.images.crop_size,
          "train files": listing.files_fingerprint([p for i in identities for p in i.paths]),
          **({"train examples": identities.fingerprint} if identities.fingerprint else {})}


def make_task(config, workdir, for_training=True):
  """Checks the config, lists the identities (synthetic ones are written once) -> Task.

  An evaluation (for_training=False) reads only the evaluation data: no training folder, no checks
  of the training batches (P x K), no training dataset; softmax mode alone counts the training
  identities, the size of its classifier.
  """
  settings = validate_config(config, for_training)
  source, image = settings.source, settings.images
  if not for_training and source.source == "folder" and not (source.eval_dir or source.pairs_file):
    raise ConfigError("nothing to evaluate: set data.eval_dir or data.pairs_file")
  softmax = config.loss.name == SOFTMAX
  identities = (sources_lib.load_train_identities(settings, config.seed, workdir) if for_training or softmax
                else None)
  eval_data = sources_lib.load_eval_data(settings, config.seed, workdir)
  if for_training:
    fall_back_best_metric(config, eval_data)
  # The ROC's false accept rates can reach 1e-3 only with 1000 different pairs or more.
  different_pairs = sum(not pair.is_same for pair in eval_data.pairs)
  far_mark = metrics.TARGET_FAR if different_pairs * metrics.TARGET_FAR >= 1 else None
  eval_paths = metrics.images_to_embed(eval_data)
  eval_dataset = input_pipeline.make_eval_dataset(eval_paths, image.load_size, image.crop_size,
                                                  image.normalization, settings.eval.eval_batch_size)
  # Said once here rather than at every evaluation; metrics.json keeps it in its data report.
  val_note = metrics.val_at_far_note(eval_data)
  if val_note:
    logging.info("VAL@FAR=1e-3: %s", val_note)
  projector_paths = eval_paths[:config.summaries.max_projector_points]
  shown_of = (projector_points(projector_paths, image.load_size, settings.eval.eval_batch_size)
              if projector_paths else None)

  def evaluate(predict, from_saved_model):
    """Retrieval on the held-out identities and verification of the pairs; the report is the ROC."""
    dataset = (input_pipeline.make_uint8_dataset(eval_paths, image.load_size, settings.eval.eval_batch_size)
               if from_saved_model else eval_dataset)
    results, roc, embeddings = metrics.evaluate(predict, dataset, eval_paths, eval_data)
    shown = shown_of(embeddings) if shown_of else None
    if roc is None:
      return task_lib.Evaluation(results, embeddings=shown)
    results["roc_auc"] = metrics.area_under_curve(*roc)

    def roc_figure():
      """This evaluation's ROC beside the untrained network's and raw pixels' (the baselines of the
      run, kept in <workdir>/initial_roc.json)."""
      curves = {"trained": roc}
      baselines = os.path.join(workdir, INITIAL_ROC)
      if os.path.isfile(baselines):
        try:
          saved = config_lib.read_json_object(baselines, "the ROC is drawn without the baselines")
          read = {name: (np.asarray(c["far"], np.float64), np.asarray(c["tar"], np.float64))
                  for name, c in saved.items()}
          if any(far.ndim != 1 or far.shape != tar.shape for far, tar in read.values()):
            raise ValueError("curves of unequal length")
          curves.update(read)
        except (DataError, KeyError, TypeError, ValueError) as e:  # shown, never trained on
          logging.warning("%s", e if isinstance(e, DataError) else f"{baselines} is not the run's "
                          "baselines (keys far, tar of equal length per curve): the ROC is drawn "
                          "without them")
      return plots.roc_figure(curves, far_mark)

    def write_report(directory):
      os.makedirs(directory, exist_ok=True)
      return [plots.save(roc_figure(), os.path.join(directory, ROC_PNG))]

    return task_lib.Evaluation(results, write_report, lambda: {"roc": plots.image(roc_figure())[None]},
                               curves={"far": roc[0].tolist(), "tar": roc[1].tolist()}, embeddings=shown)

  if not for_training:
    return task_lib.Task(name=NAME, train_dataset=None, eval_dataset=eval_dataset,
                         build_model=lambda: build_model(config, settings, len(identities) if softmax else 0),
                         make_phases=None, loss_fn=None, make_predict_fn=make_predict_fn, evaluate=evaluate,
                         saved_model_predict_fn=lambda serve: lambda images: serve(images=images)["embeddings"],
                         export=None, describe="",
                         data_report={metrics.VAL_AT_FAR: val_note} if val_note else {})
  return task_lib.Task(
      name=NAME,
      train_dataset=input_pipeline.make_train_dataset(
          identities, settings.train.identities_per_batch, settings.train.images_per_identity, image.load_size,
          image.crop_size, image.normalization, config.seed, settings.train.random_flip),
      eval_dataset=eval_dataset,
      build_model=lambda: build_model(config, settings, len(identities)),
      make_phases=lambda model, mixed: optimizers.single_phase(config.train.num_steps, config.optimizer,
                                                             mixed),
      loss_fn=(softmax_loss_fn if softmax else
               make_triplet_loss_fn(config.loss.name, config.loss.margin, config.loss.squared,
                                    config.loss.cross_replica_mining)),
      make_predict_fn=make_predict_fn,
      evaluate=evaluate,
      saved_model_predict_fn=lambda serve: lambda images: serve(images=images)["embeddings"],
      export=lambda model, path: export_model(model, path, settings,
                                              export_threshold(model, evaluate, workdir)),
      describe=(f"{source.source} data, {settings.train.identities_per_batch} identities x "
                f"{settings.train.images_per_identity} images, {image.crop_size}x{image.crop_size} crops, "
                f"loss {config.loss.name}"),
      image_summaries_fn=triplet_images,
      make_extra_eval_fn=(lambda model: make_classifier_accuracy_fn(model, identities, settings))
      if softmax else None,
      input_fingerprint=input_fingerprint(settings, identities),
      data_report=dict(sources_lib.data_report(identities, eval_data),
                       **({metrics.VAL_AT_FAR: val_note} if val_note else {})),
      headline_metrics=("recall_at_1", "verification_accuracy", "train_accuracy"))


def raw_pixel_evaluation(task):
  """The evaluation with flattened normalized crops as embeddings: what a network has to beat."""
  return task.evaluate(metrics.raw_pixel_embeddings, False)
