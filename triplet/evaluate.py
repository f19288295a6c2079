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

import json
import os

from common.app import cli
from common.app import startup
from common.training import evaluation as evaluation_lib
from common.contract.errors import ConfigError
from triplet import metrics
from triplet import task as task_lib


def main(argv):
  del argv
  workdir = _WORKDIR.value
  config = cli.run_config(_CONFIG, workdir)
  startup.prepare_run(config)
  if config.data.source == "folder" and not (config.data.eval_dir or config.data.pairs_file):
    raise ConfigError("nothing to evaluate: set data.eval_dir or data.pairs_file")
  task = task_lib.make_task(config, workdir, for_training=False)
  report_dir = _REPORT_DIR.value or os.path.join(workdir, "eval")
  evaluation = evaluation_lib.evaluate_saved(task, workdir, _SAVED_MODEL.value, report_dir)
  # A VAL@FAR not measured per fold is printed as its note (the metrics themselves stay numbers).
  results = dict(evaluation.metrics)
  if metrics.VAL_AT_FAR in task.data_report:
    results[metrics.VAL_AT_FAR] = task.data_report[metrics.VAL_AT_FAR]
  print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/triplet.py", "runs/triplet")
  _SAVED_MODEL, _REPORT_DIR = cli.define_evaluation_flags()
  cli.run(main)
