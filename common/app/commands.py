"""What the trainers' commands share: their command lines, the end of a training run (the loop,
the export, the closing lines) and the whole evaluation command."""
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile

from absl import logging

from common.app import cli
from common.app import startup
from common.contract import config as config_lib
from common.runtime import hardware
from common.training import distributed
from common.training import evaluation as evaluation_lib
from common.training import train_loop
from common.training import worker_exits
from common.training import worker_files


def run_training(default_config, default_workdir, train_and_evaluate):
  """train.py's command: --config and --workdir, then train_and_evaluate(config, workdir)."""
  config_flag, workdir_flag = cli.define_flags(default_config, default_workdir)
  cli.run(lambda argv: train_and_evaluate(config_flag.value, workdir_flag.value))


# What a trainer writes once a workdir (synthetic data, baselines): with several workers the chief
# writes it while the others wait, then they read it.
chief_first = distributed.chief_first


def train_and_export(config, workdir, *, strategy, model, phases, task, headline, outputs):
  """Trains through the shared loop, exports the SavedModel, then prints headline(results) and a
  line naming the outputs (`outputs`, then the SavedModel's folder); returns the final metrics
  (also in workdir/metrics.json).

  Every worker exports (a collective save); the chief's copy is kept, and the chief alone prints
  the figures (every worker has the same): the others say where the run's outputs are. Several
  workers leave together, and a worker that failed or left ends the others in one line with a
  retryable exit code (worker_exits.failing_together).
  """
  with worker_exits.failing_together(strategy):
    results = train_loop.train(config, workdir, strategy=strategy, model=model, phases=phases, task=task,
                               command_line=cli.command_line_choices())
    with worker_files.chief_path(os.path.join(workdir, "saved_model"), strategy) as path:
      saved_model = task.export(model, path)
  if hardware.is_chief(strategy):
    print(f"{headline(results)}\n"
          f"outputs in {os.path.abspath(workdir)}: {outputs}, {os.path.basename(saved_model)}/", flush=True)
  else:
    print(f"worker {hardware.worker_index(strategy)} of {hardware.num_workers(strategy)} is not the "
          f"chief: the chief prints the run's figures and writes its outputs in {os.path.abspath(workdir)}",
          flush=True)
  worker_exits.leave_together(strategy)  # with several workers, the process ends here
  return results


def run_evaluation(default_config, default_workdir, make_task,
                   shown=lambda metrics, task, report_dir: metrics):
  """evaluate.py's command: evaluate_run with its flags, then prints shown(metrics, task, report_dir)
  as JSON."""
  config_flag, workdir_flag = cli.define_flags(default_config, default_workdir)
  saved_model_flag, report_dir_flag = cli.define_evaluation_flags()

  def main(argv):
    del argv
    workdir, report_dir = workdir_flag.value, report_dir_flag.value
    with contextlib.ExitStack() as stack:
      if saved_model_flag.value and not workdir_flag.present:
        # A SavedModel alone: nothing is written but the report asked for (--report_dir); what the
        # task writes for itself (synthetic images) goes into a temporary folder.
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="evaluate-"))
        report_dir = report_dir or ""
        logging.info("no --workdir: %s", f"the report goes to {report_dir}" if report_dir else
                     "no report is written (--report_dir says where one goes)")
      evaluation, task, report_dir = evaluate_run(config_flag, workdir, make_task, saved_model_flag.value,
                                                  report_dir)
      print(json.dumps(shown(evaluation.metrics, task, report_dir), indent=2, sort_keys=True))

  cli.run(main)


def evaluate_run(config_flag, workdir, make_task, saved_model=None, report_dir=None):
  """Scores the newest checkpoint of workdir (or saved_model) on the evaluation set of
  make_task(config, workdir, for_training=False) and writes the report into report_dir (None:
  default_report_dir; "": no report); returns (the Evaluation, the task, report_dir).

  The config is the run's own (cli.run_config) unless --config is given.
  """
  config = cli.run_config(config_flag, workdir, saved_model)
  startup.prepare_run(config, work="evaluation")
  task = make_task(config, workdir, for_training=False)
  report_dir = default_report_dir(workdir, config) if report_dir is None else report_dir
  return evaluation_lib.evaluate_saved(task, workdir, saved_model, report_dir), task, report_dir


def default_report_dir(workdir, config):
  """<workdir>/eval, where the training wrote its final report, unless a --config.key=value flag
  changes one of the run's values (--config.data.eval_split=train, say): then eval-<key=value,...> of
  those, so that the training's report is never replaced by another split's or setting's. Values a
  --config file alone changes (training settings, mostly) leave the report in eval/."""
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      saved = config_lib.flat(json.load(f))
  except (OSError, ValueError, AttributeError):  # cli.run_config has said what is wrong with it
    return os.path.join(workdir, "eval")
  flags = config_lib.override_keys(sys.argv[1:])
  changed = {key: value for key, value in config_lib.flat(config_lib.resolved(config)).items()
             if any(key == flag or key.startswith(f"{flag}.") for flag in flags)
             and key in saved and saved[key] != value}  # keys the run did not have are no change
  if not changed:
    return os.path.join(workdir, "eval")
  name = re.sub(r"[^\w.=,+-]+", "_", ",".join(f"{key}={value}" for key, value in sorted(changed.items())))
  if len(name) > 80:  # a file name's limit is 255 bytes: cut, and told apart by the whole name's hash
    name = f"{name[:70]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
  report_dir = os.path.join(workdir, f"eval-{name}")
  logging.info("the config is not the run's: the report goes to %s (the training's stays in %s)",
               report_dir, os.path.join(workdir, "eval"))
  return report_dir
