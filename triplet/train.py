"""Trains the triplet embedding: `python -m triplet.train --config=configs/triplet.py`.

The recipe: config -> task (identities in P x K batches, embedding CNN,
triplet loss with online mining or the softmax sanity check, held-out
evaluation) -> the evaluation before training -> the shared training loop ->
a SavedModel from uint8 images to embeddings.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import json
import os

from absl import logging

from common.app import commands
from common.app import startup
from common.contract import config as config_lib
from common.contract.errors import DataError
from common.runtime import workdir as workdir_lib
from common.training import checkpoints
from common.training import evaluation as evaluation_lib
from triplet import task as task_lib


RAW_PIXELS = "raw_pixels/"
OUTPUTS = "checkpoints/, train/ and eval/ (TensorBoard), metrics.json, initial_eval.json, config.json"


def evaluate_before_training(task, model, workdir):
  """The baselines, computed once per workdir (a resumed run reads them back): the metrics of the
  untrained model and, prefixed RAW_PIXELS, of the raw crops as embeddings; their ROC curves in
  task.INITIAL_ROC."""
  path = os.path.join(workdir, "initial_eval.json")
  if not os.path.exists(path):
    if checkpoints.newest(checkpoints.checkpoint_dir(workdir)):
      return {}
    untrained, raw_pixels = evaluation_lib.make_evaluate_fn(task, model)(), task_lib.raw_pixel_evaluation(task)
    results = dict(untrained.metrics, **{RAW_PIXELS + k: v for k, v in raw_pixels.metrics.items()})
    workdir_lib.write_json(path, results)
    if untrained.curves:  # verification pairs: their ROC curves go beside the trained one in roc.png
      workdir_lib.write_json(os.path.join(workdir, task_lib.INITIAL_ROC),
                             {"untrained": untrained.curves, "raw pixels": raw_pixels.curves})
    logging.info("before training: %s", "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  fix = ("the closing line leaves out the untrained baselines; delete it and train into a new "
         "--workdir to have them again")
  try:
    baselines = config_lib.read_json_object(path, fix)
    for key, value in sorted(baselines.items()):
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{path}: {key} is {json.dumps(value)}, not a number; {fix}")
    return baselines
  except DataError as e:  # the baselines are shown, never trained on: the run goes on without them
    logging.warning("%s", e)
    return {}


def headline(results, initial):
  """The figures of the closing line, e.g. "recall_at_1 0.94 (untrained 0.27, raw pixels 0.97)" for
  each headline metric, their step, and the best evaluation's when the export holds its weights."""
  final = results.get("eval", {})
  parts = []
  for name in ("recall_at_1", "verification_accuracy", "train_accuracy"):
    if name not in final:
      continue
    baselines = [f"{label} {initial[key]:.4f}" for label, key in
                 (("untrained", name), ("raw pixels", RAW_PIXELS + name)) if key in initial]
    parts.append(f"{name} {final[name]:.4f}" + (f" ({', '.join(baselines)})" if baselines else ""))
  best = results.get("best")
  exported = (f"; saved_model/ holds step {best['step']}'s weights (best {best['metric']} "
              f"{best['value']:.4f})" if best else "")
  return f"{', '.join(parts) or 'no evaluation data'} at step {results['step']}{exported}"


def train_and_evaluate(config, workdir):
  """Trains, evaluates and exports; returns the final metrics, with "initial_eval" added."""
  strategy = startup.prepare_run(config, workdir)
  with commands.chief_first(strategy):  # the synthetic data, written once
    task = task_lib.make_task(config, workdir)
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, config.mixed_precision)
  logging.info("model: %d parameters; %s", model.count_params(), task.describe)
  with commands.chief_first(strategy):
    initial = evaluate_before_training(task, model, workdir)
  results = commands.train_and_export(config, workdir, strategy=strategy, model=model, phases=phases,
                                      task=task, headline=lambda r: headline(r, initial), outputs=OUTPUTS)
  return dict(results, initial_eval=initial)


if __name__ == "__main__":
  commands.run_training("configs/triplet.py", "runs/triplet", train_and_evaluate)
