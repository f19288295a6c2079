"""Photos for prediction: the image files of the paths and folders a user names, each read as a
photo viewer shows it (its EXIF orientation applied) in RGB, whatever its format and colour mode."""
import os

from PIL import ExifTags
from PIL import ImageOps
import numpy as np

from common.data import image_checks
from common.data import listing

# PIL reads these too, beside the formats training takes; a prediction decodes with PIL.
PHOTO_EXTENSIONS = listing.IMAGE_EXTENSIONS + (".webp", ".tif", ".tiff")


def photo_paths(paths):
  """The files of `paths`, a folder standing for its photos (sorted, not its subfolders); a
  missing path is one DataError line."""
  found = []
  for path in paths:
    found += listing.list_files(path, PHOTO_EXTENSIONS) if os.path.isdir(path) else [path]
  return found


def read_photo(path):
  """(uint8 [height, width, 3] as a viewer shows the photo, its EXIF orientation: 1 when shown as
  stored). A file that does not decode is the one line the training checks give."""
  with image_checks.decoded_image(path) as img:
    orientation = int(img.getexif().get(ExifTags.Base.Orientation, 1))
    shown = ImageOps.exif_transpose(img)
    if shown.mode.startswith("I"):  # 16-bit greyscale, which convert("RGB") would clip at 255
      grey = np.clip(np.round(np.asarray(shown, np.float64) / 257), 0, 255).astype(np.uint8)
      return np.repeat(grey[..., None], 3, axis=2), orientation
    # Palette, greyscale, CMYK, alpha (dropped): RGB as PIL converts them.
    return np.asarray(shown.convert("RGB")), orientation
