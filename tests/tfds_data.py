"""Tiny prepared copies of the TFDS data sets the trainers name (oxford_iiit_pet, stanford_dogs, lfw),
written by TFDS's own builders into a data_dir, their download replaced by a few made-up examples.

tfds.testing.mock_data cannot feed a resumable run (its examples come from a Python generator, whose
iterator a checkpoint cannot save), so the tests read real prepared files, as a user's run does.
"""
import contextlib
from unittest import mock

import numpy as np

NAMES = ("oxford_iiit_pet", "stanford_dogs", "lfw")
LFW_PEOPLE = ("Ada_Lovelace", "Alan_Turing", "Grace_Hopper", "Kurt_Goedel", "Emmy_Noether", "John_von_Neumann",
              "Emil_Post", "Alonzo_Church", "Haskell_Curry", "Rozsa_Peter")


def _box():
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  return tfds.features.BBox(0.1, 0.1, 0.9, 0.9)


def _image(rng, height, width):
  return rng.integers(0, 256, [height, width, 3], dtype=np.uint8)


def _pet(rng, index):
  height, width = 24 + 4 * (index % 3), 28
  mask = np.full([height, width, 1], 2, np.uint8)  # background; the pet a rectangle with a border
  mask[4:-4, 5:-5] = 3
  mask[6:-6, 7:-7] = 1
  return {"image": _image(rng, height, width), "segmentation_mask": mask, "label": index % 37,
          "species": index % 2, "file_name": f"pet_{index}.jpg", "head_bbox": _box()}


def _dog(rng, index):
  return {"image": _image(rng, 20 + 2 * (index % 2), 24), "image/filename": f"dog_{index}.jpg",
          "label": index % 4, "objects": {"bbox": [_box()]}}


def _face(rng, index):
  # lfw's images are 250x250: a colour per person and a little noise keep the files small.
  person = index % len(LFW_PEOPLE)
  image = np.full([250, 250, 3], [25 * person, 255 - 20 * person, 120], np.uint8)
  image[::25, ::25] = rng.integers(0, 256, [10, 10, 3], dtype=np.uint8)
  return {"image": image, "label": LFW_PEOPLE[person]}


# name: (example maker, {split: examples})
_SETS = {
    "oxford_iiit_pet": (_pet, {"train": 6, "test": 4}),
    "stanford_dogs": (_dog, {"train": 16, "test": 8}),
    "lfw": (_face, {"train": 30}),
}


def prepare(name, data_dir, seed=0):
  """Prepares data set `name` in data_dir with made-up examples; returns its builder."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  make, splits = _SETS[name]
  tfds.disable_progress_bar()
  builder = tfds.builder(name, data_dir=data_dir)

  def split_generators(self, dl_manager):  # pylint: disable=unused-argument
    rng = np.random.default_rng(seed)
    return {split: ((f"{split}_{i}", make(rng, i)) for i in range(count)) for split, count in splits.items()}

  with mock.patch.object(type(builder), "_split_generators", split_generators):
    builder.download_and_prepare()
  return builder


@contextlib.contextmanager
def no_network():
  """Nothing to download: a test that tried would fail here rather than wait on the network."""
  with mock.patch("urllib.request.urlopen", side_effect=OSError("no network in tests")):
    yield
