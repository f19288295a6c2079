"""Evaluates a segmentation model (a checkpoint in a workdir, or a SavedModel) on whole images.

python -m segmentation.evaluate --workdir=runs/segmentation   # the run's own config.json; --config.key=value on top
python -m segmentation.evaluate --config=configs/segmentation.py --saved_model=runs/segmentation/saved_model
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from common.app import commands
from segmentation import metrics
from segmentation import task as task_lib


def shown(scores, task, report_dir):
  """The printed metrics, with `mixed_up`: a line when the objects are found but their classes mixed up."""
  del task, report_dir
  line = metrics.mixed_up_line(scores)
  return dict(scores, mixed_up=line) if line else scores


if __name__ == "__main__":
  commands.run_evaluation("configs/segmentation.py", "runs/segmentation", task_lib.make_task, shown=shown)
