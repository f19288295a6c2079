"""A training run whose third step sleeps inside its compiled call: `python tests/long_call_run.py
WORKDIR SECONDS`, a trainer's command line (common/app/cli.py) whose main thread is held in
TensorFlow for as long as a test of signals needs, at no CPU cost (tests/test_signals_long_call.py).
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # as every command: signals recorded before TensorFlow's import

import sys
import time

import keras
import tensorflow as tf

from common.app import cli
from common.app import startup
from common.contract import config as config_lib
from common.contract import task as task_lib
from common.nn import optimizers
from common.training import train_loop
from helpers import loop_task

SLOW_STEP = 3
STARTS = "sleeps inside its compiled call"  # said on stderr as the slow step starts


def main(argv):
  workdir, seconds = argv[1], float(argv[2])
  config = config_lib.base_config()
  config.train.num_steps = 8
  config.train.batch_size = 4
  config.train.steps_per_loop = 4
  config.train.log_every = config.train.eval_every = config.train.checkpoint_every = 1000
  config.summaries.scalars_every = 1000
  strategy = startup.prepare_run(config, workdir)
  with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)

  def sleep_at_the_slow_step(index):
    if index == SLOW_STEP - 1:
      print(f"step {SLOW_STEP} {STARTS} ({seconds:g} s)", file=sys.stderr, flush=True)
      time.sleep(seconds)
    return 0.0

  def loss_fn(model, batch, training):
    x, y, index = batch
    loss = tf.reduce_mean(tf.square(model(x, training=training) - y))
    return loss + tf.ensure_shape(tf.py_function(sleep_at_the_slow_step, [index], tf.float32), []), {}

  dataset = tf.data.Dataset.range(1 << 30).map(
      lambda i: (tf.random.stateless_normal([4, 3], [i, 0]), tf.random.stateless_normal([4, 1], [i, 1]), i))
  train_loop.train(config, workdir, strategy=strategy, model=model, task=loop_task(dataset, loss_fn),
                   phases=[task_lib.Phase("train", config.train.num_steps, optimizer)])


if __name__ == "__main__":
  cli.run(main)
