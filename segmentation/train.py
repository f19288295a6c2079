"""Trains the segmentation model: `python -m segmentation.train --config=configs/segmentation.py`.

The recipe: config -> task (data, model, loss, metrics) -> the shared training loop -> SavedModel.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from common.app import commands
from common.app import startup
from segmentation import metrics
from segmentation import task as task_lib

OUTPUTS = "checkpoints/, train/ and eval/ (TensorBoard), metrics.json, config.json"


def headline(results):
  """The figures of the closing line: mIoU and pixel accuracy beside their all-majority-class chance,
  the foreground-vs-background IoU, and a line when the objects are found but their classes mixed up."""
  scores = results["eval"]
  line = (f"validation mIoU {scores['miou']:.4f} (all-majority-class {scores['chance_miou']:.4f}), "
          f"foreground-vs-background IoU {scores['fg_bg_iou']:.4f}, pixel accuracy {scores['pixel_accuracy']:.4f} "
          f"(all-majority-class {scores['chance_pixel_accuracy']:.4f}) at step {results['step']}")
  mixed_up = metrics.mixed_up_line(scores)
  return f"{line}\n{mixed_up}" if mixed_up else line


def train_and_evaluate(config, workdir):
  """Trains, evaluates and exports; returns the final metrics (also in workdir/metrics.json)."""
  strategy = startup.prepare_run(config, workdir)
  with commands.chief_first(strategy):  # the synthetic data, written once
    task = task_lib.make_task(config, workdir)
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, config.mixed_precision)
  return commands.train_and_export(config, workdir, strategy=strategy, model=model, phases=phases, task=task,
                                   headline=headline, outputs=OUTPUTS)


if __name__ == "__main__":
  commands.run_training("configs/segmentation.py", "runs/segmentation", train_and_evaluate)
