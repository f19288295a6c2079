"""Evaluates a fine-tuned Inception V4: top-1, top-5, per-class accuracy and a confusion matrix.

python -m inception_finetune.evaluate --workdir=runs/inception_v4   # the run's own config.json; --config.key=value on top
python -m inception_finetune.evaluate --config=configs/inception_v4.py --saved_model=runs/inception_v4/saved_model

Writes per_class_accuracy.csv, confusion_matrix.csv and confusion_matrix.png
into --report_dir (default <workdir>/eval) and prints the scalar metrics as JSON.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import json
import os

from common.app import cli
from common.app import startup
from common.training import evaluation as evaluation_lib
from inception_finetune import task as task_lib


def main(argv):
  del argv
  workdir = _WORKDIR.value
  config = cli.run_config(_CONFIG, workdir)
  startup.prepare_run(config)
  task = task_lib.make_task(config, workdir, for_training=False)
  report_dir = _REPORT_DIR.value or os.path.join(workdir, "eval")
  evaluation = evaluation_lib.evaluate_saved(task, workdir, _SAVED_MODEL.value, report_dir)
  print(json.dumps(dict(evaluation.metrics, report=report_dir), indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/inception_v4.py", "runs/inception_v4")
  _SAVED_MODEL, _REPORT_DIR = cli.define_evaluation_flags()
  cli.run(main)
