"""MultiWorkerMirroredStrategy: worker processes on 127.0.0.1 through scripts/launch_workers.py.

Every run is bounded by a timeout; on a timeout the launcher's workers (their pids are in its
output) are killed. The workers' temporary folders go to a TMPDIR of the test's, checked empty.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from common.training import distributed
from common.runtime import hardware
from common.contract.errors import ConfigError
import helpers
from segmentation import task as task_lib

TIMEOUT_S = 420
SMOKE = ["--config.train.log_every=1", "--config.summaries.images_every=1000"]


def _env(tmp):
  os.makedirs(tmp, exist_ok=True)
  return dict(os.environ, TMPDIR=str(tmp), TF_CPP_MIN_LOG_LEVEL="2")


def _worker_pids(output):
  return [int(pid) for pid in re.findall(r"^\[launcher\] worker \d+: pid (\d+)", output, re.M)]


def _kill(pids):
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


def start_launcher(trainer_args, tmp, num_workers=2):
  command = [sys.executable, "scripts/launch_workers.py", f"--num_workers={num_workers}", "--stop_timeout_s=10",
             "--", "python"] + trainer_args
  return subprocess.Popen(command, cwd=helpers.REPO_ROOT, env=_env(tmp), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=TIMEOUT_S):
  """The launcher's exit code and output; kills the launcher and its workers after `timeout`."""
  try:
    output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    output, _ = process.communicate()
    _kill(_worker_pids(output))
    pytest.fail(f"the launcher did not finish in {timeout} s:\n{output[-3000:]}")
  return process.returncode, output


def launch(trainer_args, tmp, num_workers=2):
  return finish(start_launcher(trainer_args, tmp, num_workers))


def check_one_result(output, workdir, figures):
  """The run's figures (a line matching `figures`) and its outputs are printed once, by the chief;
  worker 1 says it is not the chief; every worker logged the same evaluation; no collective ran
  eagerly (TensorFlow warns about each one); no worker logged another's exit as a crash
  (worker_exits.leave_together)."""
  assert re.findall(rf"^\[worker (\d)\] {figures}", output, re.M) == ["0"], output[-3000:]
  assert re.findall(r"^\[worker (\d)\] outputs in ", output, re.M) == ["0"], output[-3000:]
  assert re.search(rf"^\[worker 1\] worker 1 of 2 is not the chief: the chief prints the run's figures "
                   rf"and writes its outputs in {re.escape(str(workdir))}$", output, re.M), output[-3000:]
  evaluations = re.findall(r"^\[worker (\d)\] .*\] eval at step (\d+) \([\d.]+ s\): (.*)$", output, re.M)
  assert evaluations, output[-3000:]
  for worker in ("0", "1"):
    assert [e[1:] for e in evaluations if e[0] == worker] == [e[1:] for e in evaluations if e[0] == "0"]
  assert "eagerly has significant overhead" not in output
  assert not re.search(r"StartAbort|crashed|Traceback|^\[worker \d\] error", output, re.M), output[-3000:]


def digests(output):
  """{worker: (step, digest)} from the loop's log line about each worker's first batch."""
  found = re.findall(r"^\[worker (\d+)\] .*worker \d+ of \d+: its input at step (\d+) has digest (\w+)",
                     output, re.M)
  return {int(worker): (int(step), digest) for worker, step, digest in found}


def reference_digests(config, workdir, steps, num_workers=2):
  """{step: [digest of each worker's slice of global batch `step`]} of the one-process input stream."""
  hardware.set_determinism(config.seed, config.deterministic)  # as prepare_run: the shuffle's seeds
  found = {}
  for step, batch in enumerate(task_lib.make_task(config, workdir).train_dataset.take(max(steps) + 1)):
    if step in steps:
      found[step] = [distributed.batch_digest(tf.nest.map_structure(lambda t, i=i: tf.split(t, num_workers)[i], batch))
                     for i in range(num_workers)]
  return found


def wait_for(process, path):
  """Reads the launcher's output until `path` exists; returns the lines. Kills all after TIMEOUT_S."""
  started, lines = time.monotonic(), []
  for line in process.stdout:
    lines.append(line)
    if os.path.exists(path):
      return "".join(lines)
    if time.monotonic() - started > TIMEOUT_S:
      break
  process.kill()
  _kill(_worker_pids("".join(lines)))
  pytest.fail(f"{path} did not appear:\n{''.join(lines)[-3000:]}")


def model_weights(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith("model/")}


def segmentation_args(workdir, num_steps, *extra):
  return ["-m", "segmentation.train", "--config=configs/segmentation.py:smoke", f"--workdir={workdir}",
          f"--config.train.num_steps={num_steps}", "--config.model.sync_batch_norm=True"] + SMOKE + list(extra)


# `python -c AFTER_SAVES module flags...` runs the trainer module; on the non-chief worker, after each
# checkpoint and each offer of best weights, it prints the checkpoint files found under TMPDIR.
AFTER_SAVES = """
import glob, json, os, runpy, sys
from common.training import checkpoints
from common.training import run_state

def reporting(save):
  def wrapped(*args):
    result = save(*args)
    found = [path for path in glob.glob(os.path.join(os.environ["TMPDIR"], "**"), recursive=True)
             if os.path.basename(path) == "checkpoint" or ".index" in path or ".data-" in path]
    print("after a save, checkpoint files under TMPDIR:", json.dumps(found), flush=True)
    return result
  return wrapped

if json.loads(os.environ["TF_CONFIG"])["task"]["index"]:
  run_state.RunCheckpoint.save = reporting(run_state.RunCheckpoint.save)
  checkpoints.BestWeights.offer = reporting(checkpoints.BestWeights.offer)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_two_workers_shard_the_input_write_once_and_match_one_process(tmp_path):
  workdir, single = tmp_path / "two", tmp_path / "one"
  steps = ["--config.train.checkpoint_every=2", "--config.train.eval_every=4",
           "--config.train.best_metric=miou"]
  code, output = launch(["-c", AFTER_SAVES] + segmentation_args(workdir, 4, *steps)[1:], tmp_path / "tmp")
  assert code == 0, output[-3000:]
  check_one_result(output, workdir, "validation mIoU ")

  # The non-chief's copy of each collective save is gone right after it, while the run goes on:
  # checkpoints of steps 2 and 4 (the end's save finds step 4 saved), the best weights of step 4.
  after_saves = re.findall(r"^\[worker 1\] after a save, checkpoint files under TMPDIR: (.*)$", output, re.M)
  assert len(after_saves) == 4 and all(json.loads(found) == [] for found in after_saves), output[-3000:]

  # Each worker read its own half of the global batch: the two halves of the one-process stream.
  config = helpers.make_config("segmentation", "smoke", **{"model.sync_batch_norm": True})
  logged = digests(output)
  step = logged[0][0]  # the last batch of the run's first compiled call
  expected = reference_digests(config, str(tmp_path / "reference"), [step])[step]
  assert logged == {0: (step, expected[0]), 1: (step, expected[1])}
  assert expected[0] != expected[1]

  # One writer: one checkpoint folder, one set of event files, no worker's temporary folder left.
  assert sorted(os.path.relpath(p, workdir) for p in glob.glob(f"{workdir}/**/checkpoint", recursive=True)) == [
      "best/checkpoint", "checkpoints/checkpoint", "checkpoints/input/worker0/checkpoint",
      "checkpoints/input/worker1/checkpoint"]
  events = sorted(os.path.relpath(os.path.dirname(p), workdir)
                  for p in glob.glob(f"{workdir}/**/events.out.tfevents*", recursive=True))
  # The workdir's own (config, HParams), eval/ and its chance levels' run, train/.
  assert events == [".", "eval", "eval/chance", "train"]
  assert os.listdir(tmp_path / "tmp") == []
  assert sorted(os.listdir(workdir / "checkpoints" / "input")) == ["worker0", "worker1"]

  # The same global batches in one process: the same weights, but for the order of float sums.
  result = helpers.run_python(segmentation_args(single, 4, *steps), timeout=TIMEOUT_S)
  assert result.returncode == 0, result.stderr[-3000:]
  two = model_weights(str(workdir / "checkpoints" / "ckpt-4"))
  one = model_weights(str(single / "checkpoints" / "ckpt-4"))
  assert two.keys() == one.keys() and len(two) > 10
  for name in one:
    # BatchNorm's moving means of the textured scenes' activations differ by up to ~3e-5 so.
    np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-4, err_msg=name)
  print("largest difference of a weight, two workers vs one process:",
        max(float(np.max(np.abs(two[name] - one[name]))) for name in one))


@pytest.mark.slow
def test_a_killed_worker_resumes_with_every_input_position(tmp_path):
  workdir = tmp_path / "run"
  checkpoints = workdir / "checkpoints"
  args = segmentation_args(workdir, 1000, "--config.train.checkpoint_every=2", "--config.train.eval_every=1000")
  process = start_launcher(args, tmp_path / "tmp")
  pids = _worker_pids(wait_for(process, checkpoints / "ckpt-4.index"))
  assert len(pids) == 2
  os.kill(pids[1], signal.SIGKILL)
  code, output = finish(process)
  assert code == 128 + signal.SIGKILL, output[-3000:]
  # The survivor says so in one line (its own exit code 142: a retry) when its collective fails before
  # the launcher's stop timeout (a lost connection: at once; missed heartbeats: about 10 s): no traceback.
  assert "Traceback" not in output, output[-3000:]
  assert len(re.findall(r"^\[worker 0\] (?:error|interrupted)", output, re.M)) <= 1, output[-3000:]
  killed = int(tf.train.latest_checkpoint(str(checkpoints)).rsplit("-", 1)[1])
  assert killed >= 4

  # The same command resumes each worker at its own input position; Ctrl-C to the launcher then
  # stops both workers at one step, which they checkpoint together.
  process = start_launcher(args, tmp_path / "tmp")
  head = wait_for(process, checkpoints / f"ckpt-{killed + 2}.index")
  process.send_signal(signal.SIGINT)
  code, rest = finish(process)
  resumed = head + rest
  assert code in (128 + signal.SIGINT, 128 + signal.SIGTERM), resumed[-3000:]  # SIGTERM: stopped by its peer
  stops = set(re.findall(r"^\[worker \d\] interrupted by SIG\w+ at step (\d+); checkpoint", resumed, re.M))
  assert len(stops) == 1, resumed[-3000:]
  interrupted = int(stops.pop())
  assert tf.train.latest_checkpoint(str(checkpoints)).endswith(f"ckpt-{interrupted}")

  # Again, one step further: it finishes.
  args[args.index("--config.train.num_steps=1000")] = f"--config.train.num_steps={interrupted + 1}"
  code, finished = launch(args, tmp_path / "tmp")
  assert code == 0, finished[-3000:]
  assert tf.train.latest_checkpoint(str(checkpoints)).endswith(f"ckpt-{interrupted + 1}")

  config = helpers.make_config("segmentation", "smoke", **{"model.sync_batch_norm": True})
  for output, step in ((resumed, killed), (finished, interrupted)):
    for worker in (0, 1):
      assert re.search(rf"^\[worker {worker}\] .*worker {worker}: input position of step {step} restored",
                       output, re.M), output[-3000:]
    # Each worker reads on with the slice of the one-process stream it had reached: the last batch
    # of its first compiled call after the restore is that call's batch of the one-process stream.
    logged = digests(output)
    last = logged[0][0]
    assert step <= last
    expected = reference_digests(config, str(tmp_path / "reference"), [last])[last]
    assert logged == {0: (last, expected[0]), 1: (last, expected[1])}


@pytest.mark.slow
@pytest.mark.parametrize("args,figures", [
    # Mines across the two workers (loss.cross_replica_mining is on by default). BatchNorm is not
    # synchronized: each worker's moving statistics are its own until a save averages them.
    (["-m", "triplet.train", "--config=configs/triplet.py:smoke", "--config.train.num_steps=4"],
     "recall_at_1 "),
    # One step of the head phase alone: one compiled step per worker.
    (["-m", "inception_finetune.train", "--config=configs/inception_v4.py:smoke", "--config.train.num_steps=1",
      "--config.finetune.head_steps=1", "--config.data.synthetic_images_per_class=6"], "eval top-1 "),
], ids=["triplet", "inception"])
def test_other_trainers_run_on_two_workers(tmp_path, args, figures):
  workdir = tmp_path / "run"
  code, output = launch(args + [f"--workdir={workdir}"], tmp_path / "tmp")
  assert code == 0, output[-3000:]
  check_one_result(output, workdir, figures)
  assert set(digests(output)) == {0, 1}
  assert os.path.isdir(workdir / "saved_model") and os.path.isfile(workdir / "metrics.json")
  assert os.listdir(tmp_path / "tmp") == []


# Prints its TF_CONFIG; worker 1 fails once the others have printed theirs, the others sleep.
FAKE_WORKER = """
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])
index = task["task"]["index"]
print("index", index, "cluster", ",".join(task["cluster"]["worker"]), flush=True)
open(os.path.join(os.environ["TMPDIR"], f"printed{index}"), "w").close()
if index == 1:
  while len(os.listdir(os.environ["TMPDIR"])) < 3:
    time.sleep(0.1)
  sys.exit(3)
time.sleep(600)
"""


def test_launcher_gives_each_worker_its_tf_config_and_stops_all_when_one_fails(tmp_path):
  # Workers 0 and 2 would sleep 600 s: the launcher ends within finish's timeout only by stopping them.
  code, output = finish(start_launcher(["-c", FAKE_WORKER], tmp_path, num_workers=3), timeout=120)
  assert code == 3, output
  found = re.findall(r"^\[worker (\d)\] index (\d) cluster (\S+)$", output, re.M)
  assert sorted(worker for worker, _, _ in found) == ["0", "1", "2"]
  assert all(worker == index for worker, index, _ in found)
  clusters = {cluster for _, _, cluster in found}
  assert len(clusters) == 1
  addresses = clusters.pop().split(",")
  assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
  assert "worker 1 exited with code 3: stopping the others" in output


def test_multi_worker_without_tf_config_is_one_line(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)
  with pytest.raises(ConfigError, match="distribution.strategy='multi_worker' needs TF_CONFIG"):
    hardware.make_strategy("multi_worker")


# `python -c UNEVEN module flags...` runs the trainer module; worker 0 sizes its compiled calls by
# steps alone (train.seconds_per_loop=0: 100 steps), worker 1 by its own measured step time (1 s of
# steps), so that each would choose its own call lengths: on the code before the lengths were
# agreed, the two workers' collectives stopped lining up and both hung in the first long call.
UNEVEN = """
import json, os, runpy, sys
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
  sys.argv.append("--config.train.seconds_per_loop=0")
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_workers_that_would_size_their_calls_differently_agree_and_end_as_one_step_calls_do(tmp_path):
  """Calls of the agreed lengths (progress every 10 steps: calls up to 10 long) give the weights of
  calls of one step each (progress every step), bit for bit, and one clean result. (A one-process
  run's figures differ from two workers' by the order of float sums: BatchNorm's moving means by up
  to ~1e-2 after these 30 steps, ~3e-5 after test_two_workers_...'s 4.)"""
  uneven, one_step = tmp_path / "uneven", tmp_path / "one_step"
  args = ["--config=configs/segmentation.py:smoke", "--config.train.num_steps=30",
          "--config.model.sync_batch_norm=True", "--config.summaries.images_every=1000"]
  code, output = launch(["-c", UNEVEN, "segmentation.train", *args, f"--workdir={uneven}"], tmp_path / "tmp")
  assert code == 0, output[-3000:]
  check_one_result(output, uneven, "validation mIoU ")
  code, reference = launch(["-m", "segmentation.train", *args, "--config.train.log_every=1",
                            f"--workdir={one_step}"], tmp_path / "tmp")
  assert code == 0, reference[-3000:]
  result = re.compile(r"^\[worker 0\] (validation mIoU .*)$", re.M)
  assert result.findall(output) == result.findall(reference)
  agreed = model_weights(str(uneven / "checkpoints" / "ckpt-30"))
  single_steps = model_weights(str(one_step / "checkpoints" / "ckpt-30"))
  assert agreed.keys() == single_steps.keys() and len(agreed) > 10
  for name in agreed:
    np.testing.assert_array_equal(agreed[name], single_steps[name], err_msg=name)


@pytest.mark.slow
def test_a_stalled_worker_ends_the_run_with_a_retryable_code_and_a_rerun_finishes(tmp_path):
  """Worker 1 stopped (SIGSTOP) mid-run: worker 0 ends within the stall limit with one line and exit
  code 142 (an orchestrator's retry), the launcher with it; the same command then resumes."""
  workdir = tmp_path / "run"
  checkpoints = workdir / "checkpoints"
  args = segmentation_args(workdir, 1000, "--config.train.checkpoint_every=2", "--config.train.eval_every=1000",
                           "--config.train.stall_timeout_s=20")
  process = start_launcher(args, tmp_path / "tmp")
  pids = _worker_pids(wait_for(process, checkpoints / "ckpt-4.index"))
  os.kill(pids[1], signal.SIGSTOP)
  stopped = time.monotonic()
  code, output = finish(process)
  assert code == 142, output[-3000:]
  errors = re.findall(r"^\[worker 0\] (error: .*)$", output, re.M)
  assert len(errors) == 1 and "exiting with code 142 so that the run is restarted" in errors[0], output[-3000:]
  assert "Traceback" not in output
  assert time.monotonic() - stopped < 20 + 60  # the stall limit, and the launcher's stop of worker 1
  stalled = int(tf.train.latest_checkpoint(str(checkpoints)).rsplit("-", 1)[1])
  args[args.index("--config.train.num_steps=1000")] = f"--config.train.num_steps={stalled + 2}"
  code, finished = launch(args, tmp_path / "tmp")
  assert code == 0, finished[-3000:]
  assert re.search(rf"^\[worker 0\] .*resuming from .*ckpt-{stalled} at step {stalled}", finished, re.M)
  assert tf.train.latest_checkpoint(str(checkpoints)).endswith(f"ckpt-{stalled + 2}")
