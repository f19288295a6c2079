"""Exports a training run as a SavedModel, ONNX or LiteRT model taking uint8 images, checked on the
run's evaluation set before it is kept.

python scripts/export.py --workdir=runs/segmentation --format=onnx --output=runs/segmentation/model.onnx
python scripts/export.py --workdir=runs/dogs --format=litert --quantize=int8 --output=runs/dogs/model.tflite
python scripts/export.py --workdir=runs/triplet --saved_model=runs/triplet/saved_model --format=litert --output=t.tflite

The command line of common/app/run_export.py (the run read, exported, checked and described), which
converts with common/app/conversion.py and checks with common/app/export_check.py.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

from absl import flags

from common.app import cli
from common.app import run_export


def main(argv):
  del argv
  result = run_export.export(_WORKDIR.value, _FORMAT.value, _OUTPUT.value, _SAVED_MODEL.value,
                              None if _IMAGE_SIZE.value is None else (_IMAGE_SIZE.value,) * 2, _QUANTIZE.value)
  print(run_export.describe(result, _FORMAT.value, _OUTPUT.value, _QUANTIZE.value), flush=True)


if __name__ == "__main__":
  _WORKDIR = flags.DEFINE_string("workdir", None, "The training run: its config.json, weights and "
                                 "evaluation set.", required=True)
  _FORMAT = flags.DEFINE_enum("format", None, run_export.FORMATS, "What to write.", required=True)
  _OUTPUT = flags.DEFINE_string("output", None, "The file (onnx, litert) or folder (saved_model) "
                                "to write.", required=True)
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Convert this SavedModel instead of the "
                                     "run's weights.")
  _IMAGE_SIZE = flags.DEFINE_integer("image_size", None, "Fix the side of the square images the "
                                     "model takes (others are resized to it for the check); default "
                                     "any size.")
  _QUANTIZE = flags.DEFINE_enum("quantize", None, ("float16", "int8"), "LiteRT: float16 weights, or "
                                "int8 weights and activations calibrated on evaluation images.")
  cli.run(main)
