"""One table of bad inputs over the three trainers: each is exit code 2 and one `error:` line naming the
file, line, key or path, run in one interpreter through the same guard as the command lines
(common/cli.run_guarded); or, with data.skip_bad_files, a named and counted skip."""
import importlib
import os
import re

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import cli
from common.runtime import workdir as workdir_lib
from helpers import make_config
from inception_finetune import slim_checkpoint

TRAIN_MODULES = {"segmentation": "segmentation.train", "triplet": "triplet.train",
                 "inception_v4": "inception_finetune.train"}
LATIN1 = "caf\xe9".encode("latin-1")  # not UTF-8


def png(path, array):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(array).save(path)
  return path


def truncate(path, keep=0.6):
  """Cuts a file to `keep` of its bytes, inside the image data."""
  data = open(path, "rb").read()
  with open(path, "wb") as f:
    f.write(data[:int(len(data) * keep)])
  return path


def dangling(path):
  """A symbolic link at `path` to a file that does not exist."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  os.symlink(path + ".gone", path)
  return path


def noise(shape, seed):
  return np.random.default_rng(seed).integers(0, 255, shape, np.uint8)


# Segmentation: image and mask folders.


def seg_folder(root, count=4, size=32):
  for i in range(count):
    png(f"{root}/images/im{i}.png", noise((size, size, 3), i))
    png(f"{root}/masks/im{i}.png", np.random.default_rng(i).integers(0, 2, (size, size), np.uint8))
  return {"data.source": "folder", "data.images_dir": f"{root}/images", "data.masks_dir": f"{root}/masks"}


def seg_splits(root, train, evaluation):
  overrides = seg_folder(root)
  for name, text in (("train.txt", train), ("eval.txt", evaluation)):
    with open(f"{root}/{name}", "wb") as f:
      f.write(text if isinstance(text, bytes) else text.encode())
  return dict(overrides, **{"data.train_split": f"{root}/train.txt", "data.eval_split": f"{root}/eval.txt"})


def seg_truncated(root, what, split):
  overrides = seg_splits(root, "im0\nim1\nim2\n", "im3\n")
  name = "im1" if split == "train" else "im3"
  truncate(f"{root}/{what}/{name}.png")
  return overrides, f"{what}/{name}.png"


def seg_corrupt(root):
  overrides = seg_folder(root)
  with open(f"{root}/images/im2.png", "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n not really")
  return overrides, "im2.png"


def seg_mask_size(root):
  overrides = seg_folder(root)
  png(f"{root}/masks/im1.png", np.zeros((30, 32), np.uint8))
  return overrides, "im1.png"


def seg_class_id(root):
  overrides = seg_folder(root)
  png(f"{root}/masks/im3.png", np.full((32, 32), 7, np.uint8))
  return overrides, "im3.png"


def seg_dangling(root, what):
  overrides = seg_folder(root)
  if what == "images":
    png(f"{root}/masks/im4.png", np.zeros((32, 32), np.uint8))
  else:
    os.remove(f"{root}/masks/im1.png")
  return overrides, dangling(f"{root}/{what}/{'im4' if what == 'images' else 'im1'}.png")


def seg_empty_folder(root):
  os.makedirs(f"{root}/images")
  os.makedirs(f"{root}/masks")
  return {"data.source": "folder", "data.images_dir": f"{root}/images",
          "data.masks_dir": f"{root}/masks"}, f"{root}/images"


def seg_voc_without_split(root):
  png(f"{root}/VOC2012/JPEGImages/a.png", noise((32, 32, 3), 0))
  png(f"{root}/VOC2012/SegmentationClass/a.png", np.zeros((32, 32), np.uint8))
  os.makedirs(f"{root}/VOC2012/ImageSets/Segmentation")
  return {"data.source": "voc", "data.voc_root": f"{root}/VOC2012"}, "train.txt"


def seg_npy_labels(root):
  os.makedirs(root)
  np.save(f"{root}/images.npy", noise((8, 28, 28, 3), 0))
  labels = np.zeros((8, 28, 28), np.uint8)
  labels[5, 3, 3] = 9
  np.save(f"{root}/labels.npy", labels)
  return {"data.source": "npy", "data.train_images": f"{root}/images.npy",
          "data.train_labels": f"{root}/labels.npy", "data.eval_images": f"{root}/images.npy",
          "data.eval_labels": f"{root}/labels.npy"}, "labels.npy"


SEGMENTATION_FILES = {
    "corrupt image": seg_corrupt,
    "truncated image, train": lambda root: seg_truncated(root, "images", "train"),
    "truncated image, eval": lambda root: seg_truncated(root, "images", "eval"),
    "truncated mask, train": lambda root: seg_truncated(root, "masks", "train"),
    "truncated mask, eval": lambda root: seg_truncated(root, "masks", "eval"),
    "mask of another size": seg_mask_size,
    "class id out of range": seg_class_id,
    "image a link to nothing": lambda root: seg_dangling(root, "images"),
    "mask a link to nothing": lambda root: seg_dangling(root, "masks"),
    "empty folder": seg_empty_folder,
    "VOC without its split file": seg_voc_without_split,
    "npy label out of range": seg_npy_labels,
    "split file not UTF-8": lambda root: (seg_splits(root, b"im0\n" + LATIN1 + b"\n", "im3\n"),
                                          "train.txt"),
    "split file is a folder": lambda root: (dict(seg_splits(root, "im0\n", "im3\n"),
                                                 **{"data.eval_split": f"{root}/images"}), "images"),
    "id twice in a split file": lambda root: (seg_splits(root, "im0\nim1\nim0\n", "im3\n"), "im0"),
    "id in both splits": lambda root: (seg_splits(root, "im0\nim1\nim2\n", "im2\nim3\n"), "im2"),
}
SEGMENTATION_VALUES = {
    "model.widths": (), "train.keep_checkpoints": 0, "optimizer.learning_rate": 1e-50,
    "data.patch_size": 30, "loss.class_weights": (1.0, 2.0), "data.num_classes": 1,
}


# Triplet: identity folders and LFW pairs.


def identities(root, names, per_identity=3, size=24):
  for n, name in enumerate(names):
    for i in range(per_identity):
      png(f"{root}/{name}/{name}_{i + 1:04d}.png", noise((size, size, 3), 10 * n + i))
  return {"data.source": "folder", "data.train_dir": root}


def triplet_files(root):
  overrides = identities(f"{root}/train", [f"id{i}" for i in range(5)])
  return overrides, f"{root}/train/id1/id1_0002.png"


def triplet_truncated(root):
  overrides, path = triplet_files(root)
  truncate(path)
  return overrides, "id1_0002.png"


def triplet_corrupt(root):
  overrides, path = triplet_files(root)
  with open(path, "wb") as f:
    f.write(b"garbage")
  return overrides, "id1_0002.png"


def triplet_non_image(root):
  overrides, _ = triplet_files(root)
  with open(f"{root}/train/id1/notes.txt", "w") as f:
    f.write("hello")
  return overrides, "notes.txt"


def triplet_pairs(root, text):
  overrides = identities(f"{root}/train", [f"id{i}" for i in range(5)])
  identities(f"{root}/eval", ["ev0", "ev1"])
  with open(f"{root}/pairs.txt", "wb") as f:
    f.write(text if isinstance(text, bytes) else text.encode())
  return dict(overrides, **{"data.eval_dir": f"{root}/eval", "data.pairs_file": f"{root}/pairs.txt"})


TRIPLET_FILES = {
    "identity with one image": lambda root: (identities(root, ["a", "b", "c", "d"])
                                             and identities(root, ["lone"], per_identity=1), "lone"),
    "corrupt identity image": triplet_corrupt,
    "truncated identity image": triplet_truncated,
    "non-image file in an identity folder": triplet_non_image,
    "identity image a link to nothing": lambda root: (triplet_files(root)[0],
                                                      dangling(f"{root}/train/id2/id2_0004.png")),
    "pairs file not UTF-8": lambda root: (triplet_pairs(root, b"1\nev0 1 2\n" + LATIN1 + b" 1 ev1 2\n"),
                                          "pairs.txt"),
    "pairs file names a missing image": lambda root: (triplet_pairs(root, "1\nev0 1 9\nev0 1 ev1 2\n"),
                                                      "ev0_0009"),
    "pairs file is a folder": lambda root: (dict(triplet_pairs(root, "1\nev0 1 2\nev0 1 ev1 2\n"),
                                                 **{"data.pairs_file": f"{root}/eval"}), "eval"),
    "fewer identities than a batch": lambda root: (
        dict(identities(root, ["a", "b", "c"]), **{"data.identities_per_batch": 4}),
        "data.identities_per_batch"),
}
TRIPLET_VALUES = {
    "model.embedding_size": 0, "loss.margin": -0.1, "loss.name": "triplet",
    "data.crop_size": 40, "model.widths": (4, -8), "data.small_identities": "skip",
}


# Inception: class folders and a labels CSV.


def class_folders(root, classes=2, per_class=4, prefix="im"):
  for c in range(classes):
    for i in range(per_class):
      png(f"{root}/class{c}/{prefix}{i}.png", noise((40, 40, 3), 10 * c + i))
  return {"data.source": "folder", "data.train_dir": root, "data.num_classes": 0}


def inception_truncated(root, split):
  overrides = class_folders(f"{root}/train")
  class_folders(f"{root}/eval", per_class=2, prefix="ev")
  name = f"{split}/class1/{'im' if split == 'train' else 'ev'}1.png"
  truncate(f"{root}/{name}")
  return dict(overrides, **{"data.eval_dir": f"{root}/eval"}), name


def inception_dangling(root):
  overrides = class_folders(f"{root}/train")
  class_folders(f"{root}/eval", per_class=2, prefix="ev")
  return dict(overrides, **{"data.eval_dir": f"{root}/eval"}), dangling(f"{root}/eval/class0/ev9.png")


def labels_csv(root, rows):
  for i in range(6):
    png(f"{root}/images/img{i}.png", noise((40, 40, 3), i))
  with open(f"{root}/labels.csv", "wb") as f:
    f.write(rows if isinstance(rows, bytes) else rows.encode())
  return {"data.source": "csv", "data.csv_path": f"{root}/labels.csv", "data.images_dir": f"{root}/images",
          "data.image_extension": ".png", "data.num_classes": 0}


def inception_other_network(root):
  path = slim_checkpoint.write_checkpoint(f"{root}/resnet.ckpt", {
      "resnet_v1_50/conv1/weights": np.zeros((7, 7, 3, 64), np.float32)})
  return {"checkpoint_path": path}, "is not a TF-Slim InceptionV4 checkpoint"


def inception_record_label(root):
  """A TFRecord whose one example is labelled 12 of the smoke preset's 10 classes."""
  os.makedirs(root)
  path = f"{root}/train.tfrecord"
  record = tf.train.Example(features=tf.train.Features(feature={
      "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)).numpy()])),
      "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[12])),
  })).SerializeToString()
  with tf.io.TFRecordWriter(path) as writer:
    writer.write(record)
  return ({"data.source": "tfrecord", "data.train_pattern": path, "data.eval_pattern": path},
          f"{path}: record 0: label 12 is out of range; expected 0..9")


def inception_corrupt(root):
  broken = f"{root}/pug/broken.jpg"
  os.makedirs(os.path.dirname(broken))
  with open(broken, "wb") as f:
    f.write(b"\xff\xd8 not a jpeg")
  return ({"data.source": "folder", "data.train_dir": root, "data.num_classes": 0},
          f"{broken}: does not decode as an image")


GOOD_ROWS = "id,breed\nimg0,a\nimg1,b\nimg2,a\nimg3,b\nimg4,a\nimg5,b\n"
INCEPTION_FILES = {
    "truncated class image, train": lambda root: inception_truncated(root, "train"),
    "truncated class image, eval": lambda root: inception_truncated(root, "eval"),
    "class image a link to nothing, eval": inception_dangling,
    "labels.csv not UTF-8": lambda root: (labels_csv(root, GOOD_ROWS.encode() + b"img9," + LATIN1 + b"\n"),
                                          "labels.csv"),
    "labels.csv empty label": lambda root: (labels_csv(root, GOOD_ROWS.replace("img5,b", "img5,")),
                                            "labels.csv"),
    "labels.csv conflicting duplicate": lambda root: (labels_csv(root, GOOD_ROWS + "img0,b\n"), "img0"),
    "labels.csv with another image extension": lambda root: (
        dict(labels_csv(root, GOOD_ROWS), **{"data.image_extension": ".jpg"}), "data.image_extension"),
    "labels.csv is a folder": lambda root: (dict(labels_csv(root, GOOD_ROWS),
                                                 **{"data.csv_path": f"{root}/images"}), "images"),
    "missing TF-Slim checkpoint": lambda root: ({"checkpoint_path": f"{root}/nothing.ckpt"},
                                                f"checkpoint {root}/nothing.ckpt does not exist"),
    "checkpoint of another network": inception_other_network,
    "TFRecord label out of range": inception_record_label,
    "labels.csv of one-hot columns": lambda root: (labels_csv(root, "id,affenpinscher,afghan_hound\nimg0,1,0\n"),
                                                   "(one-hot columns are not labels)"),
    "class image that does not decode": inception_corrupt,
}
INCEPTION_VALUES = {
    "finetune.head_steps": 1000, "label_smoothing": 1.5, "data.image_size": 50,
    "finetune.unfreeze_last_blocks": 99, "data.num_classes": 1,
}


def value_case(key, value):
  return lambda root: ({key: value}, key)


CASES = (
    [("segmentation", name, setup) for name, setup in SEGMENTATION_FILES.items()]
    + [("segmentation", f"{key}={value!r}", value_case(key, value))
       for key, value in SEGMENTATION_VALUES.items()]
    + [("triplet", name, setup) for name, setup in TRIPLET_FILES.items()]
    + [("triplet", f"{key}={value!r}", value_case(key, value)) for key, value in TRIPLET_VALUES.items()]
    + [("inception_v4", name, setup) for name, setup in INCEPTION_FILES.items()]
    + [("inception_v4", f"{key}={value!r}", value_case(key, value))
       for key, value in INCEPTION_VALUES.items()]
    + [(trainer, "workdir is a file", lambda root: ({}, "workdir")) for trainer in TRAIN_MODULES]
    + [(trainer, "workdir locked by another run", lambda root: ({}, f"pid {os.getpid()}"))
       for trainer in TRAIN_MODULES]
)


def run_like_the_cli(trainer, config, workdir, capsys):
  """(exit code, stderr lines) of train_and_evaluate behind the command lines' guard."""
  module = importlib.import_module(TRAIN_MODULES[trainer])
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(module.train_and_evaluate, config, workdir)
  return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


def test_the_table_has_40_cases_or_more():
  assert len(CASES) >= 40


@pytest.mark.parametrize("trainer, case, setup", CASES, ids=[f"{t}: {c}" for t, c, _ in CASES])
def test_bad_input_is_exit_code_2_and_one_error_line(trainer, case, setup, tmp_path, capsys):
  overrides, named = setup(str(tmp_path / "data"))
  config = make_config(trainer, "smoke", **overrides)
  workdir = tmp_path / "run"
  if case == "workdir is a file":
    workdir.write_text("a file where the workdir should be")
    named = str(workdir)
  if case.startswith("workdir locked"):
    with workdir_lib.locked(str(workdir)):
      code, lines = run_like_the_cli(trainer, config, str(workdir), capsys)
  else:
    code, lines = run_like_the_cli(trainer, config, str(workdir), capsys)
  errors = [line for line in lines if line.startswith("error: ")]
  assert code == 2, (case, lines)
  assert len(errors) == 1 and lines[-1] == errors[0], (case, lines)
  assert named in errors[0], (case, named, errors[0])


def seg_skipped(root):
  """A truncated training mask, and an evaluation image that is a link to nothing."""
  overrides = seg_splits(root, "im0\nim1\nim2\n", "im3\nim4\n")
  truncate(f"{root}/masks/im1.png")
  png(f"{root}/masks/im4.png", np.zeros((32, 32), np.uint8))
  dangling(f"{root}/images/im4.png")
  return overrides


def triplet_skipped(root):
  overrides, _ = triplet_truncated(root)
  dangling(f"{root}/train/id2/id2_0004.png")
  return overrides


def inception_skipped(root):
  overrides, _ = inception_truncated(root, "eval")
  dangling(f"{root}/train/class0/im9.png")
  return overrides


# A file that does not decode and a link to nothing, in each trainer. Inception V4's two steps are
# both in the head phase: one compiled step (the unfrozen phase would trace another).
SKIPPED = [
    ("segmentation", seg_skipped, ("im1.png", "im4.png"), {}),
    ("triplet", triplet_skipped, ("id1_0002.png", "id2_0004.png"), {}),
    ("inception_v4", inception_skipped, ("ev1.png", "im9.png"), {"finetune.head_steps": 2}),
]


@pytest.mark.parametrize("trainer, setup, names, extra", SKIPPED, ids=[s[0] for s in SKIPPED])
def test_skip_bad_files_names_and_counts_the_skipped_files(trainer, setup, names, extra, tmp_path, caplog):
  overrides = setup(str(tmp_path / "data"))
  config = make_config(trainer, "smoke", **overrides, **extra,
                       **{"data.skip_bad_files": True, "train.num_steps": 2})
  results = importlib.import_module(TRAIN_MODULES[trainer]).train_and_evaluate(config, str(tmp_path / "run"))
  assert results["step"] == 2
  assert sum(results["data"]["skipped_files"].values()) == len(names)
  for name in names:
    assert any(name in skipped for skipped in results["data"]["skipped_names"]), name
    assert name in caplog.text
  assert "a symbolic link to" in caplog.text
  assert re.search(r"skipped [\d,]+ of [\d,]+ files that do not decode: ", caplog.text), caplog.text
