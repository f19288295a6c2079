"""Evaluates an embedding model: verification (LFW protocol), VAL at FAR 1e-3, recall@k, ROC curve.

python -m triplet.evaluate --workdir=runs/triplet   # the run's own config.json; --config.key=value on top
python -m triplet.evaluate --config=configs/triplet.py --saved_model=runs/triplet/saved_model

Metrics go to stdout as JSON (val_at_far_1e-3 as "n/a (...)" when the pairs are too few for it, or
as "pooled ..." beside val_at_far_1e-3_pooled when only all folds together have enough);
the ROC curve of the verification pairs to roc.png in --report_dir (default <workdir>/eval).
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from common.app import commands
from triplet import metrics as metrics_lib
from triplet import task as task_lib


def make_task(config, workdir, for_training):
  """The task; an evaluation's (for_training=False) refuses a config that names nothing to evaluate."""
  return task_lib.make_task(config, workdir, for_training=for_training)


def shown(metrics, task, report_dir):
  """The metrics, with a VAL@FAR not measured per fold as its note (the metrics themselves stay numbers)."""
  del report_dir
  results = dict(metrics)
  if metrics_lib.VAL_AT_FAR in task.data_report:
    results[metrics_lib.VAL_AT_FAR] = task.data_report[metrics_lib.VAL_AT_FAR]
  return results


if __name__ == "__main__":
  commands.run_evaluation("configs/triplet.py", "runs/triplet", make_task, shown)
