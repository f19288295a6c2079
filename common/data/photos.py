"""Photos for prediction: the image files of the paths and folders a user names, each read as a
photo viewer shows it (its EXIF orientation applied) in RGB, whatever its format and colour mode,
with its pixels bounded by the command's --max_pixels in place of PIL's own bound."""
import contextlib
import os

from PIL import ExifTags
from PIL import Image
from PIL import ImageOps
import numpy as np

from common.data import image_checks
from common.data import listing

# PIL reads these too, beside the formats training takes; a prediction decodes with PIL.
PHOTO_EXTENSIONS = listing.IMAGE_EXTENSIONS + (".webp", ".tif", ".tiff")
# PIL's bound on an image's pixels (89,478,485), above which it warns of a decompression bomb: the
# default --max_pixels of the commands that resize every photo (a photo is decoded whole first).
MAX_PIXELS = Image.MAX_IMAGE_PIXELS


def photo_paths(paths):
  """The files of `paths`, a folder standing for its photos (sorted, not its subfolders); a
  missing path is one DataError line."""
  found = []
  for path in paths:
    found += listing.list_files(path, PHOTO_EXTENSIONS) if os.path.isdir(path) else [path]
  return found


def check_pixels(path, max_pixels=None, tiles_key=None):
  """A photo over max_pixels (default MAX_PIXELS) is a DataError naming --max_pixels (and tiles_key,
  image_checks.check_eval_size), from its header (its pixels not decoded); one without a readable
  header is left to read_photo to name."""
  with _without_pils_bound():
    size = image_checks.header_size(path, path)
  if size:
    image_checks.check_eval_size(path, size, max_pixels or MAX_PIXELS, setting="--max_pixels",
                                 tiles_key=tiles_key)


def read_photo(path, max_pixels=None, tiles_key=None):
  """(uint8 [height, width, 3] as a viewer shows the photo, its EXIF orientation: 1 when shown as
  stored). A file that does not decode is the one line the training checks give; one over
  max_pixels the line of check_pixels (naming tiles_key)."""
  check_pixels(path, max_pixels, tiles_key)
  with _without_pils_bound(), image_checks.decoded_image(path) as img:
    orientation = int(img.getexif().get(ExifTags.Base.Orientation, 1))
    shown = ImageOps.exif_transpose(img)
    if shown.mode.startswith("I"):  # 16-bit greyscale, which convert("RGB") would clip at 255
      grey = np.clip(np.round(np.asarray(shown, np.float64) / 257), 0, 255).astype(np.uint8)
      return np.repeat(grey[..., None], 3, axis=2), orientation
    # Palette, greyscale, CMYK, alpha (dropped): RGB as PIL converts them.
    return np.asarray(shown.convert("RGB")), orientation


@contextlib.contextmanager
def _without_pils_bound():
  """PIL's bound on pixels off for the block, where --max_pixels bounds them: PIL's would print a
  DecompressionBombWarning of its own, or refuse a photo under a --max_pixels raised above it.
  The commands read photos one at a time, in their main thread."""
  bound, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
  try:
    yield
  finally:
    Image.MAX_IMAGE_PIXELS = bound
