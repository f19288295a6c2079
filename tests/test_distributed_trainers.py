"""tf.distribute on the trainers: two replicas (two logical CPUs) follow one device's loss trajectory;
and on one device, one step per compiled call and all of a phase's steps in one call train
bit-identical weights (train.steps_per_loop=1 and =100).

BatchNorm sees each replica's half of the batch unless model.sync_batch_norm, so
the runs compare with it on; triplet mining spans both replicas
(loss.cross_replica_mining, the default). Mixed precision is off. One fresh
process (logical devices must be configured before TensorFlow initializes)
runs every trainer on one device and on two replicas at the same global batch.
"""
import json
import textwrap

import numpy as np
import pytest

from helpers import run_python

SCRIPT = textwrap.dedent("""
    import hashlib
    import importlib
    import json
    import os
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from common.training import train_loop
    from tests.helpers import make_config, read_scalars

    root, cases = sys.argv[1], json.loads(sys.argv[2])
    strategies = {"one": tf.distribute.OneDeviceStrategy("/cpu:0"),
                  "two": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}

    def loss_trajectory(trainer, config_name, overrides, strategy, workdir):
      config = make_config(config_name, **overrides)
      keras.utils.set_random_seed(config.seed)  # as the trainers do: the same data and initial weights
      task = importlib.import_module(f"{trainer}.task").make_task(config, workdir)
      with strategy.scope():
        model = task.build_model()
        phases = task.make_phases(model, False)
      train_loop.train(config, workdir, strategy=strategy, model=model, phases=phases, task=task)
      losses = read_scalars(os.path.join(workdir, "train"), "loss")
      weights = hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.weights)).hexdigest()
      return {"losses": [losses[step] for step in sorted(losses)], "weights": weights}

    results = {}
    for name, (trainer, config_name, overrides, runs) in cases.items():
      overrides["data.cache_dir"] = os.path.join(root, name, "data")  # written once, read by each run
      results[name] = {run: loss_trajectory(trainer, config_name, dict(overrides, **run_overrides),
                                            strategies[strategy], os.path.join(root, name, run))
                       for run, (strategy, run_overrides) in runs.items()}
    print("RESULT", json.dumps(results))
""")

STEPS = 4
# Every step's loss in the summaries; no evaluation, checkpoint or heavy summary before the end.
QUIET = {"summaries.scalars_every": 1, "summaries.images_every": 1000,
         "summaries.histograms_every": 1000, "summaries.activation_stats": False}


def runs(steps, one_call=True):
  """One device a step per call, the same in one call of up to 100 steps (a loss scalar only at
  the end, no call length from the speed), and two replicas."""
  found = {"one": ["one", {"train.steps_per_loop": 1}], "two": ["two", {}]}
  if one_call:
    found["one_call"] = ["one", {"summaries.scalars_every": steps, "train.seconds_per_loop": 0.0}]
  return found


def cadence(steps):
  return {"train.num_steps": steps, "train.log_every": steps, "train.eval_every": steps,
          "train.checkpoint_every": steps}


CASES = {
    "segmentation": ["segmentation", "segmentation",
                     dict(QUIET, **cadence(STEPS), **{"model.sync_batch_norm": True}), runs(STEPS)],
    # Per-replica mining, the same two replicas otherwise, shows that the gathering matters.
    "triplet": ["triplet", "triplet", dict(QUIET, **cadence(STEPS), **{"model.sync_batch_norm": True}),
                dict(runs(STEPS), two_per_replica_mining=["two", {"loss.cross_replica_mining": False}])],
    # Inception V4 at 75x75 is slow on a CPU: three steps of the second phase only, with Mixed_7d
    # unfrozen (its BatchNorm on batch statistics, the frozen blocks' in inference mode). No
    # dropout: two replicas draw other masks than one device.
    "inception": ["inception_finetune", "inception_v4",
                  dict(QUIET, **cadence(3), **{
                      "model.sync_batch_norm": True, "finetune.head_steps": 0,
                      "finetune.unfreeze_last_blocks": 1, "model.dropout_rate": 0.0,
                      "model.hidden_dropout_rate": 0.0, "train.batch_size": 4,
                      "data.num_classes": 4, "data.synthetic_images_per_class": 6,
                      "data.eval_batch_size": 8}),
                  # The call length is the loop's, shown on the two others: not Inception's third run.
                  runs(3, one_call=False)],
}


@pytest.mark.slow
def test_two_replicas_follow_one_device_and_calls_of_any_length_train_the_same_weights(tmp_path):
  result = run_python(["-c", SCRIPT, str(tmp_path), json.dumps(CASES)], timeout=1200)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
  assert lines, result.stderr[-3000:]
  results = json.loads(lines[0][len("RESULT "):])
  for name, trained in results.items():
    one = trained["one"]["losses"]
    assert len(one) == CASES[name][2]["train.num_steps"], (name, trained)
    if "one_call" in trained:
      assert trained["one_call"]["losses"] == one[-1:], (name, trained)
      assert trained["one_call"]["weights"] == trained["one"]["weights"], name
    # Sums in another order: up to ~1e-4 apart after four steps on the textured synthetic scenes.
    np.testing.assert_allclose(trained["two"]["losses"], one, rtol=3e-4, err_msg=name)
  # The comparison can fail: mining within each replica's half is another loss from the first step.
  per_replica = results["triplet"]["two_per_replica_mining"]["losses"]
  assert abs(per_replica[0] - results["triplet"]["one"]["losses"][0]) > 1e-3, per_replica
