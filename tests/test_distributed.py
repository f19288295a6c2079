"""tf.distribute: the loop on two replicas (two logical CPUs) matches one device at the same global batch,
and two replicas compiled with XLA (train.jit_compile) match two without."""
import re
import textwrap

import pytest

from helpers import run_python

# Logical devices must be configured before TensorFlow initializes, hence a fresh process.
SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from common.contract import config as config_lib
    from common.nn import optimizers
    from common.contract import task as task_lib
    from common.training import train_loop
    from tests.helpers import loop_task

    def run(strategy, workdir, jit_compile=False):
      config = config_lib.base_config()
      config.train.jit_compile = jit_compile
      config.train.num_steps = 5
      config.train.batch_size = 8
      config.train.log_every = 5
      config.optimizer.learning_rate = 0.05
      config.train.ema_decay = float(sys.argv[2])  # the run ends with (returns) the average
      config.train.accumulate_steps = int(sys.argv[3])
      keras.utils.set_random_seed(0)
      with strategy.scope():
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-3))(inputs)
        if with_xla:  # each replica's BatchNorm statistics, on its own device
          hidden = keras.layers.BatchNormalization()(hidden)
        model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
        optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)
      data = tf.data.Dataset.range(1000).map(
          lambda i: (tf.random.stateless_normal([6], [i, 0]), tf.cast(i % 3, tf.int32))).batch(8)

      def loss_fn(model, batch, training):
        x, y = batch
        per_example = keras.losses.sparse_categorical_crossentropy(y, model(x, training=training),
                                                                   from_logits=True)
        return tf.reduce_mean(per_example), {}

      train_loop.train(config, workdir, strategy=strategy, model=model, task=loop_task(data, loss_fn),
                       phases=[task_lib.Phase("train", 5, optimizer)])
      return [np.array(v) for v in model.weights]

    with_xla = sys.argv[4] == "xla"
    two_replicas = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    if with_xla:
      # A collective in the forward pass cannot compile on CPU replicas: refused at start-up.
      from common.app import cli
      from common.training import train_step
      from tests.helpers import make_config
      for trainer, key in (("segmentation", "model.sync_batch_norm"), ("triplet", "loss.cross_replica_mining")):
        try:
          cli.run_guarded(train_step.check_jit_compile, make_config(trainer, **{"train.jit_compile": True, key: True}),
                          two_replicas)
        except SystemExit as e:
          print("EXIT", e.code)
      one, two = run(two_replicas, sys.argv[1] + "/two", False), run(two_replicas, sys.argv[1] + "/xla", True)
    else:
      one, two = run(tf.distribute.OneDeviceStrategy("/cpu:0"), sys.argv[1] + "/one"), run(two_replicas, sys.argv[1] + "/two")
    print("RESULT", max(float(np.max(np.abs(a - b))) for a, b in zip(one, two)))
""")


@pytest.mark.slow
@pytest.mark.parametrize("ema_decay, accumulate_steps", [(0.0, 1), (0.9, 2)])
def test_two_replicas_match_one_device(tmp_path, ema_decay, accumulate_steps):
  # Clipping is on (optimizer.clipnorm=1.0): it must see the gradient of the whole batch. The
  # weight average and micro-batches of 2 per replica are computed alike on every replica.
  assert run_script(tmp_path, ema_decay, accumulate_steps, "one_device")[1] < 1e-5


@pytest.mark.slow
def test_two_replicas_with_xla_match_two_without_or_are_refused_in_one_line(tmp_path):
  # XLA compiles each replica's forward and backward pass on its device (one cluster around both
  # replicas read the second one's BatchNorm statistics from the first device: InvalidArgumentError).
  result, difference = run_script(tmp_path, 0.0, 1, "xla")
  assert difference < 1e-5
  # Synchronized BatchNorm or cross-replica mining put a collective there: one line each, exit 2.
  assert re.findall(r"^EXIT (\d+)$", result.stdout, re.M) == ["2", "2"], result.stdout
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 2, result.stderr[-3000:]
  for line, key in zip(errors, ("model.sync_batch_norm", "loss.cross_replica_mining")):
    assert line.startswith(f"error: train.jit_compile=True with {key}=True on 2 replicas that are not all GPUs")
    assert line.endswith(f"compiles its collective there on GPUs only; set train.jit_compile=False or {key}=False")


def run_script(tmp_path, ema_decay, accumulate_steps, compared):
  """The script's result, and the largest difference of a weight (BatchNorm's statistics too) between its two runs."""
  result = run_python(["-c", SCRIPT, str(tmp_path), str(ema_decay), str(accumulate_steps), compared], timeout=600)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
  assert lines, result.stderr[-3000:]
  print(compared, "largest difference of a weight:", lines[0].split()[1])
  return result, float(lines[0].split()[1])
