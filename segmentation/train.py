"""Trains the segmentation model: `python -m segmentation.train --config=configs/segmentation.py`.

The recipe: config -> task (data, model, loss, metrics) -> the shared training loop -> SavedModel.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import os

from common.app import cli
from common.training import distributed
from common.app import startup
from common.training import train_loop
from segmentation import task as task_lib


def train_and_evaluate(config, workdir):
  """Trains, evaluates and exports; returns the final metrics (also in workdir/metrics.json)."""
  strategy = startup.prepare_run(config, workdir)
  task = task_lib.make_task(config, workdir)
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, config.mixed_precision)
  results = train_loop.train(config, workdir, strategy=strategy, model=model, phases=phases, task=task)
  with distributed.chief_path(os.path.join(workdir, "saved_model"), strategy) as path:
    saved_model = task.export(model, path)  # every worker exports (a collective save), the chief's is kept
  scores = results["eval"]
  print(f"validation mIoU {scores['miou']:.4f} (all-majority-class {scores['chance_miou']:.4f}), pixel "
        f"accuracy {scores['pixel_accuracy']:.4f} (all-majority-class {scores['chance_pixel_accuracy']:.4f}) "
        f"at step {results['step']}\n"
        f"outputs in {os.path.abspath(workdir)}: checkpoints/, train/ and eval/ (TensorBoard), "
        f"metrics.json, config.json, {os.path.basename(saved_model)}/", flush=True)
  return results


def main(argv):
  del argv
  train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/segmentation.py", "runs/segmentation")
  cli.run(main)
