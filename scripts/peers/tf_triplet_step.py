"""Our triplet losses (triplet/losses.py), measured like the PyTorch peer; prints one JSON object.

  python scripts/peers/tf_triplet_step.py --loss semi_hard --batch_size 1024

The step is the loss and its gradient with respect to random unit embeddings
of num_per_class examples per class, compiled with tf.function, the same
work as torch_peers.py's triplet step. Reported:
  seconds_per_step   median over timed windows after warm-up steps;
  step_peak_bytes    the resident set high-water mark during all the steps
                     (warm-up included) minus the resident size before the
                     first, after tracing; it includes the first run's
                     one-time allocations (graph optimization, kernels: about
                     15 MiB here). One batch size per process (peer_runner).
  largest_tensor_bytes, graph_tensor_bytes  the largest tensor, and all
                     tensors together, in the step's graph (static shapes):
                     what memory the algorithm asks for, free of allocator
                     effects. All tensors together is an upper bound on the
                     step's working memory (nothing freed early).
"""
import argparse
import json

import numpy as np
import tensorflow as tf

from scripts.peers import measure
from triplet import losses


def graph_tensor_bytes(graph):
  """(largest, total) bytes of the tensors in a graph whose shapes are fully known."""
  sizes = [t.shape.num_elements() * t.dtype.size
           for op in graph.get_operations() for t in op.outputs
           if t.shape.is_fully_defined() and t.dtype != tf.resource and t.dtype != tf.variant]
  return max(sizes, default=0), sum(sizes)


def make_step(loss_name, labels, embeddings, margin):
  loss_fn = losses.LOSSES[loss_name]

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss, _ = loss_fn(labels, embeddings, margin)
    return loss, tape.gradient(loss, embeddings)

  return step


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--loss", choices=sorted(losses.LOSSES), default="semi_hard")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--embedding_dim", type=int, default=128)
  parser.add_argument("--num_per_class", type=int, default=4)
  parser.add_argument("--margin", type=float, default=0.2)
  parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--warmup_steps", type=int, default=3)
  parser.add_argument("--windows", type=int, default=3)
  parser.add_argument("--steps_per_window", type=int, default=1)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
  num_classes = max(1, args.batch_size // args.num_per_class)
  labels = tf.constant(np.arange(args.batch_size) % num_classes, tf.int32)
  raw = np.random.default_rng(args.seed).normal(size=(args.batch_size, args.embedding_dim))
  embeddings = tf.Variable((raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32))
  step = make_step(args.loss, labels, embeddings, args.margin)
  largest, total = graph_tensor_bytes(step.get_concrete_function().graph)

  def run():
    tf.nest.map_structure(lambda t: t.numpy(), step())

  # TensorFlow's allocator keeps the memory of the first step for the next ones:
  # the peak is only seen from before the first step.
  rss_before, resettable = measure.reset_peak_rss()
  seconds = measure.time_windows(run, args.warmup_steps, args.windows, args.steps_per_window)
  print(json.dumps({
      "loss": args.loss,
      "tensorflow": tf.__version__,
      "batch_size": args.batch_size,
      "embedding_dim": args.embedding_dim,
      "num_per_class": args.num_per_class,
      "margin": args.margin,
      "seconds_per_step": measure.median(seconds),
      "window_seconds_per_step": seconds,
      "step_peak_bytes": max(0, measure.peak_rss_bytes() - rss_before) if resettable else None,
      "largest_tensor_bytes": largest,
      "graph_tensor_bytes": total,
  }))


if __name__ == "__main__":
  main()
