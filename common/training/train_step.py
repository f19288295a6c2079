"""The compiled training step: loss, loss scaling, all-reduce, clipping, the non-finite guard.

The non-finite guard is Keras' LossScaleOptimizer in both precisions (float32 starts at scale 1,
where scaling is exact): a step whose gradients are not finite changes no weight and lowers the
scale; the step restores the BatchNorm statistics that its forward pass touched.
"""
import math

import tensorflow as tf

from common.contract.errors import ConfigError
from common.training import calibration
from common.training import distributed

# The keys whose True puts a collective into the forward pass: BatchNorm's statistics over every
# replica, triplet mining over every replica's embeddings.
_FORWARD_COLLECTIVES = ("model.sync_batch_norm", "loss.cross_replica_mining")


def check_jit_compile(config, strategy):
  """Refuses train.jit_compile=True where it cannot compile, before anything is read: on several
  replicas that are not all GPUs, with a collective in the forward pass. XLA compiles each replica's
  forward and backward pass (make_train_step), and TensorFlow runs a collective inside such a
  compiled function on GPU replicas only (elsewhere it needs a merge_call, which cannot run there)."""
  if not config.train.jit_compile or strategy.num_replicas_in_sync == 1:
    return
  devices = distributed.step_devices(strategy)
  if all(tf.DeviceSpec.from_string(d).device_type == "GPU" for d in devices):
    return
  for key in _FORWARD_COLLECTIVES:
    section, name = key.split(".")
    if config.get(section, {}).get(name):
      raise ConfigError(
          f"train.jit_compile=True with {key}=True on {strategy.num_replicas_in_sync} replicas that are "
          f"not all GPUs ({', '.join(devices)}): XLA compiles each replica's forward pass, and TensorFlow "
          f"compiles its collective there on GPUs only; set train.jit_compile=False or {key}=False")


def make_train_step(model, optimizer, loss_fn, strategy, clipnorm=0.0, jit_compile=False,
                    accumulate_steps=1, average=None):
  """The compiled step: (distributed batch) -> metrics, updating model and optimizer in place.

  Clipping by global norm happens here, on the gradient summed over replicas:
  Keras' own clipnorm would clip each replica's part separately. Each replica's
  loss is its mean over its part of the batch divided by the number of replicas
  (the loss of the global batch), and its regularization is divided the same
  way, so that the sum over replicas counts it once (tf.nn.scale_regularization_loss).

  accumulate_steps=k: each replica's part is cut into k micro-batches, whose gradients are
  averaged before the one update (the activations of one micro-batch are held at a time). For a
  loss that is a mean over examples and a model without BatchNorm this is the update of the whole
  batch; BatchNorm normalizes each micro-batch by its own statistics and moves its averages k
  times per step.

  average: an averaging.WeightAverage, updated after each finite step.
  """
  variables = model.trainable_variables
  statistics = calibration.batch_norm_statistics(model)
  replicas = strategy.num_replicas_in_sync

  def gradients(batch):
    """(loss, metrics, regularization, gradients of the scaled total) of one micro-batch."""
    with tf.GradientTape() as tape:
      loss, metrics = loss_fn(model, batch, True)
      regularization = tf.add_n([tf.cast(l, tf.float32) for l in model.losses]) if model.losses else 0.0
      scaled = optimizer.scale_loss((loss + regularization) / replicas)
    return loss, metrics, regularization, tape.gradient(scaled, variables)

  def accumulated(batch):
    """gradients() averaged over the batch's accumulate_steps micro-batches, one after another.
    Unrolled (tracing grows with the count): a device loop inside the loop of steps trips Grappler
    (AddOpsRewrite's temporary variables collide in the nested frames: AlreadyExistsError on
    Inception V4)."""
    micro = tf.nest.map_structure(
        lambda t: tf.reshape(t, tf.concat([[accumulate_steps, -1], tf.shape(t)[1:]], 0)), batch)
    sums = None
    for i in range(accumulate_steps):
      # A micro-batch is read once the previous one's gradients are summed, so that the executor
      # does not run the forward passes side by side (holding every micro-batch's activations).
      with tf.control_dependencies(tf.nest.flatten(sums) if sums else []):
        part = tf.nest.map_structure(lambda t: t[i], micro)  # pylint: disable=cell-var-from-loop
      found = gradients(part)
      sums = found if sums is None else tf.nest.map_structure(tf.add, sums, found)
    return tf.nest.map_structure(lambda t: t / accumulate_steps, sums)

  compute = accumulated if accumulate_steps > 1 else gradients
  # XLA compiles the work of one device: with several replicas, each replica's forward and backward
  # pass, whose variables are its own device's; the all-reduce and the update stay in the step's
  # graph (one XLA cluster around strategy.run would read every replica's BatchNorm statistics
  # from the first device: "Trying to access resource ... located in device").
  if jit_compile and replicas > 1:
    compute = tf.function(compute, jit_compile=True)

  def replica_step(batch):
    context = tf.distribute.get_replica_context()
    saved_statistics = [tf.identity(v) for v in statistics]
    loss, metrics, regularization, grads = compute(batch)
    total = loss + regularization
    if replicas > 1:
      grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    finite = tf.logical_and(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]),
                            tf.math.is_finite(total))
    all_finite = tf.equal(
        context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32)), 0.0)
    scale = tf.cast(optimizer.dynamic_scale, tf.float32)
    # Gradients are still multiplied by the loss scale, and so is the clipping threshold.
    if clipnorm:
      grads, scaled_norm = tf.clip_by_global_norm(grads, clipnorm * scale)
    else:
      scaled_norm = tf.linalg.global_norm(grads)
    # The optimizer sums the replicas' gradients again, hence 1 / replicas. A non-finite loss can
    # have finite gradients (a loss cut off by tf.where, say), which Adam's momentum would still
    # apply: NaN gradients make the LossScaleOptimizer skip the step whatever the cause.
    factor = tf.where(all_finite, 1.0 / replicas, math.nan)
    optimizer.apply([g * tf.cast(factor, g.dtype) for g in grads], variables)
    for variable, saved in zip(statistics, saved_statistics):
      variable.assign(tf.where(all_finite, variable, saved))
    if average is not None:
      average.update(all_finite)
    out = {"loss": loss, "regularization": tf.cast(regularization, tf.float32),
           "grad_norm": tf.where(all_finite, scaled_norm / scale, 0.0),
           "finite": tf.cast(all_finite, tf.float32), "loss_scale": scale}
    out.update(metrics)
    return out

  @tf.function(jit_compile=jit_compile and replicas == 1)
  def train_step(batch):
    per_replica = strategy.run(replica_step, args=(batch,))
    return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            for name, value in per_replica.items()}

  return train_step
