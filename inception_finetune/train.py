"""Fine-tunes TF-Slim's Inception V4: `python -m inception_finetune.train --config=configs/inception_v4.py
--config.checkpoint_path=.../inception_v4.ckpt`.

The recipe: config -> task (data, model, loss, metrics) -> restore the TF-Slim
checkpoint (its head excluded) -> phase 1 trains the new head (trainable_scopes)
-> phase 2 unfreezes the last base blocks at a lower learning rate -> the
shared training loop (evaluation report in eval/) -> SavedModel.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from absl import logging

from common.app import commands
from common.app import startup
from common.training import checkpoints
from inception_finetune import slim_checkpoint
from inception_finetune import task as task_lib

OUTPUTS = ("checkpoints/, train/ (TensorBoard), eval/ (TensorBoard, confusion matrix, per-class accuracy), "
           "metrics.json, config.json, labels.txt")


def choose_start(config, workdir):
  """Says which weights the run starts from; returns the TF-Slim checkpoint to restore, or None.

  A checkpoint in the workdir wins (the run resumes), and the log says so
  plainly: TF-Slim silently preferring a stale train_dir confused its users.
  """
  resume = checkpoints.newest(checkpoints.checkpoint_dir(workdir))
  if resume:
    logging.warning("STARTING FROM %s (resuming this workdir); checkpoint_path %s is not read",
                    resume, config.checkpoint_path or "(unset)")
    return None
  if not config.checkpoint_path:
    logging.warning("STARTING FROM RANDOM WEIGHTS: checkpoint_path is empty (BatchNorm statistics "
                    "are recomputed into each checkpoint; see the BatchNorm line below)")
    return None
  path = slim_checkpoint.check_slim_checkpoint(config.checkpoint_path)
  logging.info("STARTING FROM the TF-Slim checkpoint %s", path)
  return path


def headline(results):
  """The figures of the closing line: top-1 beside its chance levels, and top-5."""
  scores = results["eval"]
  return (f"eval top-1 {scores['top1']:.4f} (chance: majority class {scores['chance_top1_majority']:.4f}, "
          f"uniform {scores['chance_top1_uniform']:.4f}), top-5 {scores['top5']:.4f} at step {results['step']}")


def train_and_evaluate(config, workdir):
  """Fine-tunes, evaluates and exports; returns the final metrics (also in workdir/metrics.json)."""
  slim_path = choose_start(config, workdir)  # first, so that a wrong path fails in seconds
  strategy = startup.prepare_run(config, workdir)
  with commands.chief_first(strategy):  # the synthetic data, written once
    task = task_lib.make_task(config, workdir)
  with strategy.scope():
    model = task.build_model()
    if slim_path:
      slim_checkpoint.restore(model, slim_path, config.checkpoint_exclude_scopes,
                              config.ignore_missing_vars)
    phases = task.make_phases(model, config.mixed_precision)
  task_lib.log_batch_norm_plan(model, config)
  return commands.train_and_export(config, workdir, strategy=strategy, model=model, phases=phases, task=task,
                                   headline=headline, outputs=OUTPUTS)


if __name__ == "__main__":
  commands.run_training("configs/inception_v4.py", "runs/inception_v4", train_and_evaluate)
