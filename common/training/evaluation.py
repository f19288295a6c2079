"""Scoring a model: its current weights during training, the newest checkpoint of a run, or a
SavedModel, through the trainer's Task.evaluate; what a trainer's evaluation uses of the engine
(EvalSampler)."""
import os

from absl import logging
import numpy as np

from common.runtime import run_log
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import checkpoints

# A signal stops an evaluation before its next batch (the training loop says what it saved).
_DURING_EVALUATION = "during the evaluation; nothing was written"


def make_evaluate_fn(task, model):
  """evaluate_fn() -> Evaluation of `model`'s current weights, compiled once."""
  predict = signals.checked(task.make_predict_fn(model), _DURING_EVALUATION)
  extra = task.make_extra_eval_fn(model) if task.make_extra_eval_fn else None

  def evaluate_fn():
    evaluation = task.evaluate(predict, False)
    if extra:
      evaluation.metrics.update(extra())
    return evaluation

  return evaluate_fn


def load_predict_fn(task, workdir, saved_model=None):
  """The predict function of a SavedModel, or of the newest checkpoint in workdir."""
  if saved_model:
    return task.saved_model_predict_fn(checkpoints.load_saved_model(saved_model, trainer=task.name)
                                       .signatures["serving_default"])
  model = task.build_model()
  logging.info("evaluating %s", checkpoints.restore_model(model, workdir))
  return task.make_predict_fn(model)


def evaluate_saved(task, workdir, saved_model=None, report_dir=None):
  """Scores a SavedModel or the newest checkpoint; writes the report into report_dir if given."""
  predict = signals.checked(load_predict_fn(task, workdir, saved_model), _DURING_EVALUATION)
  if report_dir:
    with workdir_lib.writing(report_dir, flag="--report_dir"):
      os.makedirs(report_dir, exist_ok=True)
    run_log.keep_in(os.path.join(report_dir, "eval.log"))
  evaluation = task.evaluate(predict, bool(saved_model))
  if report_dir:
    with workdir_lib.writing(report_dir, flag="--report_dir"):  # a disk that fills up on the way
      evaluation.write(report_dir)
  return evaluation


class EvalSampler:
  """Watches one evaluation pass: the first `count` examples with the model's outputs for them, and
  every batch's targets and outputs to on_batch, without another forward pass.

  Give the evaluation batches() as its dataset of (inputs, targets) and predict as its predict
  function: it calls predict on the inputs of each batch it has just read.
  """

  def __init__(self, dataset, predict, count, on_batch=None):
    self.examples = []  # [(input, target, output)] as numpy arrays
    self._dataset = dataset
    self._predict = predict
    self._count = count
    self._on_batch = on_batch
    self._targets = None

  def batches(self):
    for inputs, targets in self._dataset:
      self._targets = targets
      yield inputs, targets

  def predict(self, inputs):
    outputs = self._predict(inputs)
    if self._on_batch:
      self._on_batch(self._targets, outputs)
    for i in range(min(len(inputs), self._count - len(self.examples))):
      self.examples.append((np.asarray(inputs[i]), np.asarray(self._targets[i]), np.asarray(outputs[i])))
    return outputs
