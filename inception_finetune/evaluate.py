"""Evaluates a fine-tuned Inception V4: top-1, top-5, per-class accuracy and a confusion matrix.

python -m inception_finetune.evaluate --workdir=runs/inception_v4   # the run's own config.json; --config.key=value on top
python -m inception_finetune.evaluate --config=configs/inception_v4.py --saved_model=runs/inception_v4/saved_model

Writes per_class_accuracy.csv, confusion_matrix.csv and confusion_matrix.png
into --report_dir (default <workdir>/eval) and prints the scalar metrics as JSON.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from common.app import commands
from inception_finetune import task as task_lib

if __name__ == "__main__":
  commands.run_evaluation("configs/inception_v4.py", "runs/inception_v4", task_lib.make_task,
                          shown=lambda metrics, task, report_dir: dict(metrics, report=report_dir or None))
