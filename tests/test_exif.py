"""A JPEG photo whose EXIF orientation is not 1 and that has a mask is refused up front, naming the
file: TensorFlow decodes its pixels as stored, a viewer shows them turned, and a square photo's
mask fits either way, so the size check cannot catch it."""
import os

import numpy as np
from PIL import Image
import pytest

from common.app import cli
from common.data import image_checks
from helpers import make_config
from segmentation import class_masks
from segmentation import sources as seg_sources
from segmentation import train


def write_folder(root, orientation_of_im2):
  """Four square JPEG photos with PNG masks drawn on the photo as shown; im2 has the given orientation."""
  os.makedirs(f"{root}/images")
  os.makedirs(f"{root}/masks")
  for i in range(4):
    mask = np.zeros((32, 32), np.uint8)
    mask[:, :8] = 1  # an object along the left edge of the shown photo
    photo = Image.fromarray(np.where(mask[..., None] == 1, 200, 30).astype(np.uint8).repeat(3, axis=2))
    exif = Image.Exif()
    if i == 2:
      exif[0x0112] = orientation_of_im2
      photo = photo.transpose(Image.Transpose.ROTATE_90)  # orientation 6: stored turned 90 degrees left
    photo.save(f"{root}/images/im{i}.jpg", exif=exif)
    Image.fromarray(mask).save(f"{root}/masks/im{i}.png")
  return {"data.source": "folder", "data.images_dir": f"{root}/images", "data.masks_dir": f"{root}/masks"}


def test_the_orientation_is_read_from_jpeg_files_only(tmp_path):
  write_folder(str(tmp_path), 6)
  assert image_checks.exif_orientation(str(tmp_path / "images" / "im2.jpg")) == 6
  assert image_checks.exif_orientation(str(tmp_path / "images" / "im1.jpg")) == 1
  assert image_checks.exif_orientation(str(tmp_path / "masks" / "im2.png")) == 1


@pytest.mark.parametrize("skip_bad_files", [False, True])
def test_an_exif_6_photo_with_a_mask_is_one_line_naming_it(skip_bad_files, tmp_path, capsys):
  overrides = write_folder(str(tmp_path / "data"), 6)
  config = make_config("segmentation", "smoke", **overrides, **{"data.skip_bad_files": skip_bad_files})
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(train.train_and_evaluate, config, str(tmp_path / "run"))
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2 and len(lines) == 1, lines
  assert lines[0].startswith(f"error: {tmp_path}/data/images/im2.jpg: EXIF orientation 6 "), lines
  assert "orientation 1" in lines[0]  # what to do
  assert not os.path.exists(tmp_path / "run" / "checkpoints")  # before any training


def test_orientation_1_photos_pass_the_check(tmp_path):
  write_folder(str(tmp_path), 1)
  pairs = seg_sources.list_folder_pairs(str(tmp_path / "images"), str(tmp_path / "masks"))
  assert len(class_masks.check_pairs(pairs, 2, 255, skip_bad_files=False)[0]) == 4
