"""The compiled-call side of the training loop (common.training.train_loop): a phase's steps run
up to `train.steps_per_loop` at a time inside one compiled call, which reads its batches from the
plain, checkpointable input iterator and hands back every step's metrics at once (the host syncs
once per call, not once per step); then what the call's results say before any action runs: the
non-finite steps skipped (counted and named; `train.max_consecutive_nonfinite` in a row stop the
run with a report) and the speed that sets the next call's length."""
import time

from absl import logging
import tensorflow as tf

from common.contract.errors import DataError
from common.contract.errors import TrainingDiverged
from common.runtime import signals as signals_lib
from common.training import actions as actions_lib
from common.training import diagnostics
from common.training import distributed
from common.training import train_step as train_step_lib


def make_train_loop(train_step, iterator, cluster, step, max_consecutive):
  """(loop, names): loop(num_steps, consecutive, proposal) runs up to num_steps steps in one compiled
  call; proposal is the length this worker would give the next call (Cluster.agree).

  consecutive is the count of non-finite steps in a row so far; the call stops early at the
  step that brings it to max_consecutive. Returns {"metrics": [steps run, K] (one row a step,
  columns `names`), "consecutive", "last_batch": the host batch of the last step run}, and what the
  workers agreed (Cluster.agree): whether to stop, and the next call's length.
  The next batch is read (and copied to the step's device) while a step runs, except where
  that step may end the call early: the iterator never reads past the last step run, so that
  its checkpointed position is exact. A dataset that ends raises tf.errors.OutOfRangeError.
  """
  strategy = cluster.strategy
  names = []

  def fetch():
    return cluster.read_ahead(next(iterator))

  @tf.function
  def loop(num_steps, consecutive, proposal):
    first = fetch()
    # The step's outputs, known from its trace, set the columns of the metrics rows.
    names[:] = sorted(train_step.get_concrete_function(
        distributed.distribute_batch(first, strategy)).structured_outputs)
    rows = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[len(names)])

    def body(i, consecutive, batch, last, rows):
      del last
      more = i + 1 < num_steps
      may_end = consecutive + 1 >= max_consecutive  # this step may be the last of the call
      ahead = tf.cond(more & ~may_end, fetch, lambda: batch)
      metrics = train_step(distributed.distribute_batch(batch, strategy))
      step.assign_add(1)
      consecutive = tf.where(metrics["finite"] > 0, 0, consecutive + 1)
      following = tf.cond(more & may_end & (consecutive < max_consecutive), fetch, lambda: ahead)
      rows = rows.write(i, tf.stack([tf.cast(metrics[name], tf.float32) for name in names]))
      return i + 1, consecutive, following, batch, rows

    def cond(i, consecutive, *_):
      return (i < num_steps) & (consecutive < max_consecutive)

    _, consecutive, _, last, rows = tf.while_loop(cond, body, (0, consecutive, first, first, rows))
    out = {"metrics": rows.stack(), "consecutive": consecutive, "last_batch": last}
    out.update(cluster.agree(proposal))
    return out

  return loop, names


class CompiledCalls:
  """A phase's compiled calls (make_train_loop), and what each call's results say before any
  action runs: the skipped non-finite steps (counted, each named; too many in a row stop the run)
  and the speed that sets the next call's length."""

  def __init__(self, run, phase, consecutive):
    train_cfg = run.config.train
    train_step = train_step_lib.make_train_step(run.model, phase.optimizer, run.task.loss_fn,
                                                run.cluster.strategy, run.config.optimizer.clipnorm,
                                                train_cfg.jit_compile, train_cfg.accumulate_steps,
                                                run.average)
    self._loop, self._names = make_train_loop(train_step, run.checkpoint.iterator, run.cluster,
                                              run.checkpoint.step, train_cfg.max_consecutive_nonfinite)
    self._run = run
    self.step = int(run.checkpoint.step)
    self.consecutive = consecutive
    self._seconds_per_step = None  # unknown until a call after the first (which traces)
    self._traced = False
    self._proposal = None
    self._agreed = None  # what the workers agreed in the last call

  def next_length(self):
    """The next call's length (agreed with the other workers); raises this worker's stop flag
    first if it was signalled, so that the call tells them."""
    cluster = self._run.cluster
    cluster.flag_signal()
    self._proposal = actions_lib.call_length(self._run.config.train, self._seconds_per_step)
    return cluster.call_length(self._proposal, self._agreed)

  def run(self, end):
    """Runs the steps up to `end` in one compiled call (fewer if it stops at non-finite steps);
    returns the actions' Call."""
    first, started = self.step, time.monotonic()
    steps = f"steps {first + 1} to {end}" if end > first + 1 else f"step {end}"
    what = f"the compiled call of {steps}" if self._traced else f"the first compiled call ({steps}, traced first)"
    expected = self._seconds_per_step and self._seconds_per_step * (end - first)  # None: unknown yet
    try:
      with self._run.profile.marking(first + 1), signals_lib.running(what, expected,
                                                                     "writes a checkpoint and stops"):
        out = self._loop(tf.constant(end - first, tf.int32), tf.constant(self.consecutive, tf.int32),
                         tf.constant(self._proposal, tf.int32))
        rows = out["metrics"].numpy()  # the one read of the call's metrics
    except tf.errors.OutOfRangeError:
      raise DataError(f"the training dataset ended at step {int(self._run.checkpoint.step)}; it must "
                      "repeat (.repeat())") from None
    self.step = first + len(rows)
    if self._traced:  # the first call's time is mostly tracing
      self._seconds_per_step = (time.monotonic() - started) / len(rows)
    self._traced = True
    self._agreed = {name: out[name] for name in ("stop", "next_length") if name in out}
    batch = out["last_batch"]
    self._run.cluster.log_input_once(self.step - 1, batch)
    metrics = [dict(zip(self._names, map(float, row))) for row in rows]
    self._count_nonfinite(metrics, first, batch, int(out["consecutive"]))
    return actions_lib.Call(self.step, metrics, batch, self._agreed)

  def _count_nonfinite(self, metrics, first, batch, consecutive):
    skipped = [offset for offset, values in enumerate(metrics) if not values["finite"]]
    if skipped:
      self._run.checkpoint.nonfinite_steps.assign_add(len(skipped))
    for offset in skipped:
      logging.warning("step %d: loss or gradients not finite (loss %s); step skipped, weights "
                      "unchanged", first + offset + 1, metrics[offset]["loss"])
    self.consecutive = consecutive
    if consecutive >= self._run.config.train.max_consecutive_nonfinite:
      _stop_diverged(self._run, batch, consecutive)


def _stop_diverged(run, batch, consecutive):
  """Saves the last finite weights (the non-finite steps changed none) and raises the report."""
  model, checkpoint = run.model, run.checkpoint

  def loss_and_grads():
    with tf.GradientTape() as tape:
      loss, _ = run.task.loss_fn(model, batch, True)
    return loss, tape.gradient(loss, model.trainable_variables)

  checkpoint.save()  # first: the report's forward passes in training mode move BatchNorm statistics
  report = diagnostics.locate_nonfinite(model, batch[0], loss_and_grads)
  raise TrainingDiverged(
      f"{consecutive} non-finite steps in a row, the last at step {int(checkpoint.step)}: "
      f"{report}; checkpoint of the last finite weights in {checkpoint.directory}")
