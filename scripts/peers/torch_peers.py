"""PyTorch peers of the benchmarks; runs inside the peer venv and prints one JSON object.

  PEER/bin/python scripts/peers/torch_peers.py inception --batch_size 8 --image_size 299
  PEER/bin/python scripts/peers/torch_peers.py triplet --batch_size 1024 --miner semihard

inception: a training step of timm's inception_v4 (forward, cross-entropy,
backward, optimizer step) on random images; images/s is the median over timed
windows after warm-up steps.

triplet: pytorch-metric-learning's miner (BatchHardMiner, or TripletMarginMiner
with type_of_triplets="semihard") and TripletMarginLoss, with backward, on
random unit embeddings of num_per_class examples per class; seconds per step
(median) and the step's peak host memory: the resident set high-water mark
during all the steps minus the resident size before the first, as
tf_triplet_step.py measures ours (one batch size per process).

Imports nothing from the project but measure.py (standard library only): it
runs in another environment.
"""
import argparse
import json
import platform

import measure  # beside this script, standard library only
import torch


def make_optimizer(name, parameters, learning_rate):
  if name == "sgd":
    return torch.optim.SGD(parameters, lr=learning_rate, momentum=0.9)
  if name == "adam":
    return torch.optim.Adam(parameters, lr=learning_rate)
  raise ValueError(f"--optimizer {name}: choose sgd or adam")


def run_inception(args):
  import timm  # pylint: disable=g-import-not-at-top
  model = timm.create_model("inception_v4", pretrained=False, num_classes=args.num_classes)
  model.train()
  optimizer = make_optimizer(args.optimizer, model.parameters(), args.learning_rate)
  generator = torch.Generator().manual_seed(args.seed)
  images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator)
  labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=generator)
  loss_fn = torch.nn.CrossEntropyLoss()

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()

  seconds = measure.time_windows(step, args.warmup_steps, args.windows, args.steps_per_window)
  return {
      "peer": "timm inception_v4",
      "timm": timm.__version__,
      "parameters": sum(p.numel() for p in model.parameters()),
      "batch_size": args.batch_size,
      "image_size": args.image_size,
      "optimizer": args.optimizer,
      "images_per_second": args.batch_size / measure.median(seconds),
      "window_seconds_per_step": seconds,
      "peak_rss_bytes": measure.peak_rss_bytes(),
  }


def run_triplet(args):
  import pytorch_metric_learning  # pylint: disable=g-import-not-at-top
  from pytorch_metric_learning import losses, miners  # pylint: disable=g-import-not-at-top
  if args.miner == "semihard":
    miner = miners.TripletMarginMiner(margin=args.margin, type_of_triplets="semihard")
  else:
    miner = miners.BatchHardMiner()
  loss_fn = losses.TripletMarginLoss(margin=args.margin)
  generator = torch.Generator().manual_seed(args.seed)
  num_classes = max(1, args.batch_size // args.num_per_class)
  labels = torch.arange(args.batch_size) % num_classes
  raw = torch.randn(args.batch_size, args.embedding_dim, generator=generator)
  embeddings = torch.nn.functional.normalize(raw, dim=1).requires_grad_(True)

  def step():
    embeddings.grad = None
    loss = loss_fn(embeddings, labels, miner(embeddings, labels))
    loss.backward()

  rss_before, resettable = measure.reset_peak_rss()
  seconds = measure.time_windows(step, args.warmup_steps, args.windows, args.steps_per_window)
  return {
      "peer": f"pytorch-metric-learning {args.miner} + TripletMarginLoss",
      "pytorch_metric_learning": pytorch_metric_learning.__version__,
      "batch_size": args.batch_size,
      "embedding_dim": args.embedding_dim,
      "num_per_class": args.num_per_class,
      "margin": args.margin,
      "seconds_per_step": measure.median(seconds),
      "window_seconds_per_step": seconds,
      "step_peak_bytes": max(0, measure.peak_rss_bytes() - rss_before) if resettable else None,
  }


def parse_args(argv):
  common = argparse.ArgumentParser(add_help=False)
  common.add_argument("--threads", type=int, default=2)
  common.add_argument("--seed", type=int, default=0)
  common.add_argument("--warmup_steps", type=int, default=3)
  common.add_argument("--windows", type=int, default=3)
  common.add_argument("--steps_per_window", type=int, default=1)
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="peer", required=True)
  inception = sub.add_parser("inception", parents=[common])
  inception.add_argument("--batch_size", type=int, default=8)
  inception.add_argument("--image_size", type=int, default=299)
  inception.add_argument("--num_classes", type=int, default=120)
  inception.add_argument("--optimizer", choices=["sgd", "adam"], default="adam")
  inception.add_argument("--learning_rate", type=float, default=1e-3)
  triplet = sub.add_parser("triplet", parents=[common])
  triplet.add_argument("--batch_size", type=int, default=128)
  triplet.add_argument("--embedding_dim", type=int, default=128)
  triplet.add_argument("--num_per_class", type=int, default=4)
  triplet.add_argument("--margin", type=float, default=0.2)
  triplet.add_argument("--miner", choices=["semihard", "batch_hard"], default="semihard")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  torch.set_num_threads(args.threads)
  torch.manual_seed(args.seed)
  result = run_inception(args) if args.peer == "inception" else run_triplet(args)
  result.update(torch=torch.__version__, threads=args.threads, device="cpu",
                machine=platform.machine(), warmup_steps=args.warmup_steps,
                windows=args.windows, steps_per_window=args.steps_per_window)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
