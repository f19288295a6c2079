"""benchmark.py --peers: side-by-side comparisons with what people use instead, and their table.

timm's inception_v4 and pytorch-metric-learning's triplet loss run in the peer venv
(scripts/peers/), a PIL-in-a-generator input pipeline in this process; a missing peer is skipped.
"""
import keras
import numpy as np
from PIL import Image
import tensorflow as tf

from common.nn import optimizers
from common.runtime import hardware
from common.training import distributed
from common.training import train_step
from scripts.benchmarking import memory_estimate
from scripts.benchmarking import timing
from scripts.peers import peer_runner

TRIPLET_PEER_SIZES = (128, 512, 1024)
TRIPLET_GROWTH_SIZES = (256, 512, 1024)
TRIPLET_PEER_LOSSES = (("batch_hard", "batch_hard"), ("semi_hard", "semihard"))


def make_pil_generator_dataset(pairs, patch_size, patches_per_image, batch_size, shuffle_buffer, seed):
  """The input pipeline most people write first: PIL in a Python generator feeding from_generator.

  The same work as segmentation/data.py: decode an image and its mask, cut
  patches_per_image random patch_size crops at the same places, shuffle, batch.
  """
  def generate():
    rng = np.random.default_rng(seed)
    while True:
      for index in rng.permutation(len(pairs)):
        image_path, mask_path = pairs[index]
        image = np.asarray(Image.open(image_path).convert("RGB"))
        mask = np.asarray(Image.open(mask_path))
        for _ in range(patches_per_image):
          y = rng.integers(0, image.shape[0] - patch_size + 1)
          x = rng.integers(0, image.shape[1] - patch_size + 1)
          yield (image[y:y + patch_size, x:x + patch_size],
                 mask[y:y + patch_size, x:x + patch_size].astype(np.int32))

  signature = (tf.TensorSpec([patch_size, patch_size, 3], tf.uint8),
               tf.TensorSpec([patch_size, patch_size], tf.int32))
  dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
  return (dataset.shuffle(shuffle_buffer, seed=seed).batch(batch_size, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE))


def peer_segmentation_input(result, settings):
  config, task = result["_config"], result["_task"]
  cfg = config.data
  if not task.train_files:
    return {"skipped": f"the PIL peer reads image files; data.source={cfg.source} has none"}
  if min(Image.open(task.train_files[0][0]).size) < cfg.patch_size:
    return {"skipped": f"the PIL peer cuts no patches from images smaller than data.patch_size="
                       f"{cfg.patch_size}"}
  dataset = make_pil_generator_dataset(task.train_files, cfg.patch_size, cfg.patches_per_image,
                                       config.train.batch_size, cfg.shuffle_buffer, config.seed)
  rate = timing.measure_input(dataset, config.train.batch_size, settings)
  return {"peer": "PIL in a Python generator through from_generator",
          "peer_images_per_s": rate, "ours_images_per_s": result["input_images_per_s"],
          "ratio": result["input_images_per_s"] / rate}


def measure_full_network(result, strategy):
  """Our float32 step with every layer trained (what timm's peer runs).

  Returns ({variant: images/s}, timed steps per window of the last variant).
  """
  task, config, settings = result["_task"], result["_config"], result["_settings"]
  keras.mixed_precision.set_global_policy("float32")
  with strategy.scope():
    model = task.build_model()
    optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)
    optimizer.build(model.trainable_variables)
  batches = [distributed.distribute_batch(batch, strategy) for batch in result["_batches"]]
  rates, steps = {}, 1
  for name in ("float32", "float32+xla"):
    if name in settings.variants:
      timing.progress(f"{name} all layers: training step (for the timm peer)")
      step_fn = train_step.make_train_step(model, optimizer, task.loss_fn, strategy,
                                              config.optimizer.clipnorm, jit_compile=name.endswith("xla"))
      _, seconds, steps = timing.time_train_step(step_fn, batches, settings)
      rates[name] = config.train.batch_size / seconds
  return rates, steps


def peer_inception(result, strategy, threads, timeout_s):
  config, settings = result["_config"], result["_settings"]
  missing = peer_runner.missing_peer_venv()
  if missing:  # our full-network step is measured only for the ratio to timm's
    return missing
  ours, steps = measure_full_network(result, strategy)
  timing.progress("timm inception_v4: training step")
  peer = peer_runner.run_peer(
      ["inception", "--batch_size", config.train.batch_size, "--image_size", config.data.image_size,
       "--num_classes", config.data.num_classes, "--optimizer", "adam",
       "--learning_rate", config.optimizer.learning_rate, "--threads", threads,
       "--warmup_steps", timing.WARMUP_STEPS, "--windows", settings.windows, "--steps_per_window", steps],
      timeout_s)
  if "skipped" in peer:
    return peer
  peer["ours_images_per_s"] = ours
  peer["ratios"] = {variant: rate / peer["images_per_second"] for variant, rate in ours.items()}
  return peer


def peer_triplet(threads, timeout_s):
  """Our batch-hard and semi-hard losses and pytorch-metric-learning's, one process per size."""
  rows = []
  for loss, miner in TRIPLET_PEER_LOSSES:
    sizes = sorted(set(TRIPLET_PEER_SIZES) | (set(TRIPLET_GROWTH_SIZES) if loss == "semi_hard" else set()))
    for size in sizes:
      common = ["--batch_size", size, "--threads", threads]
      ours = peer_runner.run_tf_triplet(["--loss", loss] + common, timeout_s)
      peer = (peer_runner.run_peer(["triplet", "--miner", miner] + common, timeout_s)
              if size in TRIPLET_PEER_SIZES else {"skipped": "not compared at this size"})
      rows.append({"loss": loss, "batch_size": size, "ours": ours, "peer": peer})
  return rows


def run_peers(results, args, strategy):
  peers = {}
  threads = args.threads or hardware.usable_cpus()
  for result in results:
    name = result["trainer"]
    timing.progress(f"{name}: peers")
    if name == "segmentation":
      peers[name] = peer_segmentation_input(result, result["_settings"])
    elif name == "inception_v4":
      peers[name] = peer_inception(result, strategy, threads, args.peer_timeout_s)
    elif name == "triplet":
      peers[name] = peer_triplet(threads, args.peer_timeout_s)
  return peers


def _mib(value):
  return "-" if value is None else f"{value / memory_estimate.MIB:.1f}"


def format_peers(peers):
  lines = ["== peers"]
  if "segmentation" in peers:
    peer = peers["segmentation"]
    lines.append("segmentation input pipeline vs " + (
        f"skipped ({peer['skipped']})" if "skipped" in peer else
        f"{peer['peer']}: ours {peer['ours_images_per_s']:.1f} images/s, peer "
        f"{peer['peer_images_per_s']:.1f} images/s, ratio {peer['ratio']:.2f}x"))
  if "inception_v4" in peers:
    peer = peers["inception_v4"]
    if "skipped" in peer:
      lines.append(f"inception_v4 training step vs timm: skipped ({peer['skipped']})")
    else:
      ours = ", ".join(f"{v} {r:.2f} images/s ({peer['ratios'][v]:.2f}x)"
                       for v, r in peer["ours_images_per_s"].items())
      lines.append(f"inception_v4 training step, every layer trained, vs timm inception_v4 (torch "
                   f"{peer['torch']}, timm {peer['timm']}, batch {peer['batch_size']}, "
                   f"{peer['image_size']}x{peer['image_size']}, Adam, {peer['threads']} threads): "
                   f"timm {peer['images_per_second']:.2f} images/s; ours (ours/timm): {ours}")
  if "triplet" in peers:
    lines.append("triplet loss + gradient on unit embeddings [B, 128], 4 per class, one process per "
                 "side and row; peak = resident set high-water mark over the steps minus the "
                 "resident size before the first (includes one-time allocations); largest tensor "
                 "and all tensors = static sizes in our step's graph (loss and gradient)")
    lines.append(f"{'loss':<11}{'B':>6}{'ours ms':>10}{'peer ms':>10}{'ours/peer':>10}"
                 f"{'ours peak MiB':>15}{'peer peak MiB':>15}{'largest MiB':>13}{'all MiB':>10}")
    for row in peers["triplet"]:
      ours, peer = row["ours"], row["peer"]
      if "skipped" in ours:
        lines.append(f"{row['loss']:<11}{row['batch_size']:>6}  ours skipped: {ours['skipped']}")
        continue
      peer_ms = None if "skipped" in peer else 1000 * peer["seconds_per_step"]
      speed = "-" if peer_ms is None else f"{peer_ms / (1000 * ours['seconds_per_step']):.2f}x"
      lines.append(
          f"{row['loss']:<11}{row['batch_size']:>6}{1000 * ours['seconds_per_step']:>10.1f}"
          f"{'-' if peer_ms is None else f'{peer_ms:.1f}':>10}{speed:>10}"
          f"{_mib(ours['step_peak_bytes']):>15}{_mib(peer.get('step_peak_bytes')):>15}"
          f"{_mib(ours['largest_tensor_bytes']):>13}{_mib(ours['graph_tensor_bytes']):>10}")
    skipped = {row["peer"]["skipped"] for row in peers["triplet"]
               if "skipped" in row["peer"] and row["batch_size"] in TRIPLET_PEER_SIZES}
    lines += [f"  peer skipped: {why}" for why in sorted(skipped)]
    lines.append("  ours/peer > 1 means ours is faster")
  return "\n".join(lines)
