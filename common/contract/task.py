"""The contract between a trainer and the shared machinery.

Each trainer's `task.py` has `make_task(config, workdir, for_training=True) -> Task`,
which checks the config, builds the datasets and returns everything below. The
training loop, the evaluation CLI, the exporter and the benchmark use a trainer
only through its Task, so a trainer folder plus `common/` is a complete template.
An evaluation's Task (for_training=False) reads only what evaluation uses: it
has no training dataset, and the fields that only training uses may be None.
"""
import dataclasses
from typing import Callable, Optional

from absl import logging
import keras
import tensorflow as tf


@dataclasses.dataclass
class Evaluation:
  """One pass over the evaluation set.

  Attributes:
    metrics: {name: float}, what the loop logs, summarizes and puts in metrics.json.
    write_report: optional write_report(directory) -> [paths written] (ROC curve, confusion matrix).
    summary_images: optional summary_images() -> {name: [N, H, W, C] uint8 images}, drawn from what
      the evaluation predicted: the training loop writes them to TensorBoard at each evaluation.
    curves: what the report draws, as JSON (triplet: the ROC's far and tar), so that a later
      report can draw this evaluation beside its own (the baselines of a run).
    embeddings: optional embeddings() -> (vectors [N, D] float32, {column: N values}, uint8
      thumbnails [N, S, S, 3] or None), what TensorBoard's Projector shows of the evaluation (at
      most summaries.MAX_PROJECTOR_POINTS points): the training loop writes them at each evaluation.
  """
  metrics: dict
  write_report: Optional[Callable[[str], list]] = None
  summary_images: Optional[Callable[[], dict]] = None
  curves: Optional[dict] = None
  embeddings: Optional[Callable[[], tuple]] = None

  def write(self, directory):
    """Writes the report files (if there are any) into directory, and logs their paths."""
    for path in self.write_report(directory) if self.write_report else ():
      logging.info("wrote %s", path)


@dataclasses.dataclass
class Task:
  """What a trainer provides.

  Attributes:
    name: the trainer's name.
    train_dataset: endless (inputs, targets) batches of train.batch_size (None for an evaluation).
    eval_dataset: what make_predict_fn's function takes, in batches: (inputs, targets) or inputs.
    build_model: builds the training model (call inside the strategy scope, after the precision
      policy is set).
    make_phases: make_phases(model, mixed_precision) -> [Phase].
    loss_fn: loss_fn(model, batch, training) -> (scalar float32 loss, {name: scalar}).
    make_predict_fn: make_predict_fn(model) -> a compiled predict(inputs) giving the outputs that
      evaluate scores (the same outputs as the exported SavedModel's).
    evaluate: evaluate(predict, from_saved_model) -> Evaluation over the evaluation set. A SavedModel
      takes uint8 images of any size, so its predict gets the task's raw-image evaluation inputs.
    saved_model_predict_fn: saved_model_predict_fn(serving signature) -> predict, as above.
    export: export(model, path) -> path of the SavedModel written.
    describe: a few words on the data, for logs and benchmark tables.
    image_summaries_fn: optional image_summaries_fn(model, batch, count) -> {name: at most `count`
      images in [0, 1]} (count: summaries.max_outputs, what is written; drawing more is wasted).
    make_extra_eval_fn: optional make_extra_eval_fn(model) -> (() -> {name: float}): metrics that
      need the training model itself (the triplet trainer's softmax head), added during training.
    train_files: the training examples' files, where the source is files (the benchmark's
      PIL-pipeline peer reads them); None otherwise.
    input_fingerprint: {name: JSON value} of what the training input's position depends on (file
      list digest, batch size, crop size, sampler settings); saved with each checkpoint, and a
      resumed run whose fingerprint differs is refused unless train.reset_input_pipeline.
    data_report: what the data checks found, {name: JSON value} (files skipped with
      data.skip_bad_files, say); the loop puts it into metrics.json under "data".
    calibrate: optional calibrate(model), run by the training loop on the weights it serves when it
      writes a checkpoint, which keeps the result for every reader (common/training/calibration.py):
      Inception V4 recomputes the BatchNorm statistics of layers trained from random weights. None
      for an evaluation.
    run_files: {file name: text} the loop writes into the workdir with config.json, once the run
      holds the lock and its checkpoint is checked (Inception's labels.txt and class_balance.csv).
    headline_metrics: the evaluation metrics that runs are compared by, most telling first (those
      of the closing line): the first metric columns of TensorBoard's HParams.
    make_actions: optional make_actions(model, summaries) -> [common.training.actions.Action]: the
      trainer's own work between the loop's compiled calls (images of its predictions, say), each
      with its cadence (every=, at=) and chief_only=, made at each phase's start; they join the
      engine's actions after its summaries. summaries: the run's RunSummaries (its `train` writer).
      An action must not change the weights, so that where calls end never does.
  """
  name: str
  train_dataset: tf.data.Dataset
  eval_dataset: tf.data.Dataset
  build_model: Callable[[], keras.Model]
  make_phases: Callable
  loss_fn: Callable
  make_predict_fn: Callable
  evaluate: Callable[..., Evaluation]
  saved_model_predict_fn: Callable
  export: Callable[[keras.Model, str], str]
  describe: str = ""
  image_summaries_fn: Optional[Callable] = None
  make_extra_eval_fn: Optional[Callable] = None
  train_files: Optional[list] = None
  input_fingerprint: dict = dataclasses.field(default_factory=dict)
  data_report: dict = dataclasses.field(default_factory=dict)
  calibrate: Optional[Callable[[keras.Model], None]] = None
  run_files: dict = dataclasses.field(default_factory=dict)
  headline_metrics: tuple = ()
  make_actions: Optional[Callable] = None


@dataclasses.dataclass
class Phase:
  """A stretch of training with its own optimizer and its own trainable set.

  prepare() sets `layer.trainable` for the phase (frozen BatchNorm layers then
  run in inference mode); the phase trains `model.trainable_variables` after it.
  The name, what the phase trains, is in the logs; checkpoints name its optimizer
  `optimizer_<checkpoint_name or name>`, so that a phase can be renamed and still resume.
  """
  name: str
  num_steps: int
  optimizer: keras.optimizers.Optimizer
  prepare: Optional[Callable[[], None]] = None
  checkpoint_name: Optional[str] = None
