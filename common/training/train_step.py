"""The compiled training step: loss, loss scaling, all-reduce, clipping, the non-finite guard.

The non-finite guard is Keras' LossScaleOptimizer in both precisions (float32 starts at scale 1,
where scaling is exact): a step whose gradients are not finite changes no weight and lowers the
scale; the step restores the BatchNorm statistics that its forward pass touched.
"""
import math

import tensorflow as tf

from common.training import evaluation


def make_train_step(model, optimizer, loss_fn, strategy, clipnorm=0.0, jit_compile=False):
  """The compiled step: (distributed batch) -> metrics, updating model and optimizer in place.

  Clipping by global norm happens here, on the gradient summed over replicas:
  Keras' own clipnorm would clip each replica's part separately. Each replica's
  loss is its mean over its part of the batch divided by the number of replicas
  (the loss of the global batch), and its regularization is divided the same
  way, so that the sum over replicas counts it once (tf.nn.scale_regularization_loss).
  """
  variables = model.trainable_variables
  statistics = evaluation.batch_norm_statistics(model)
  replicas = strategy.num_replicas_in_sync

  def replica_step(batch):
    context = tf.distribute.get_replica_context()
    saved_statistics = [tf.identity(v) for v in statistics]
    with tf.GradientTape() as tape:
      loss, metrics = loss_fn(model, batch, True)
      regularization = tf.add_n([tf.cast(l, tf.float32) for l in model.losses]) if model.losses else 0.0
      total = loss + regularization
      scaled = optimizer.scale_loss(total / replicas)
    grads = tape.gradient(scaled, variables)
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
    out = {"loss": loss, "regularization": tf.cast(regularization, tf.float32),
           "grad_norm": tf.where(all_finite, scaled_norm / scale, 0.0),
           "finite": tf.cast(all_finite, tf.float32), "loss_scale": scale}
    out.update(metrics)
    return out

  @tf.function(jit_compile=jit_compile)
  def train_step(batch):
    per_replica = strategy.run(replica_step, args=(batch,))
    return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            for name, value in per_replica.items()}

  return train_step
