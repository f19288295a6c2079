"""Evaluates a segmentation model (a checkpoint in a workdir, or a SavedModel) on whole images.

python -m segmentation.evaluate --workdir=runs/segmentation   # the run's own config.json; --config.key=value on top
python -m segmentation.evaluate --config=configs/segmentation.py --saved_model=runs/segmentation/saved_model
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import json
import os

from common.app import cli
from common.app import startup
from common.training import evaluation as evaluation_lib
from segmentation import task as task_lib


def main(argv):
  del argv
  workdir = _WORKDIR.value
  config = cli.run_config(_CONFIG, workdir)
  startup.prepare_run(config)
  task = task_lib.make_task(config, workdir, for_training=False)
  report_dir = _REPORT_DIR.value or os.path.join(workdir, "eval")
  evaluation = evaluation_lib.evaluate_saved(task, workdir, _SAVED_MODEL.value, report_dir)
  print(json.dumps(evaluation.metrics, indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/segmentation.py", "runs/segmentation")
  _SAVED_MODEL, _REPORT_DIR = cli.define_evaluation_flags()
  cli.run(main)
