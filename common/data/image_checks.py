"""Image files checked up front, as the pipelines decode them, in a thread pool; skipped files
counted for the data report; the bound on the pixels of a whole image, from its header."""
import concurrent.futures
import contextlib
import io
import itertools
import re

from absl import logging
from PIL import Image
import tensorflow as tf

from common.contract.errors import DataError
from common.data.listing import read_file
from common.data.listing import UndecodableFileError

# Formats that both PIL and tf.io.decode_image read, so a file PIL accepts up
# front does not fail later inside the input pipeline.
TF_IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "GIF")

# Log progress of an up-front check only for lists at least this long.
_PROGRESS_MIN_ITEMS = 1000
_NUM_CHECK_THREADS = 8
# Items handed to the thread pool (or records batched by a TFRecord check) at a time, so that
# TFRecord files are never read whole.
CHECK_CHUNK = 256
_EXIF_ORIENTATION = 0x0112  # the EXIF tag
# How many skipped names the summary line lists before "...", and the data report keeps.
_MAX_NAMES_LOGGED = 10
_MAX_NAMES_REPORTED = 100


@contextlib.contextmanager
def decoded_image(path, contents=None):
  """Opens and fully decodes an image with PIL; UndecodableFileError if it does not decode.

  PIL raises many types for broken files (OSError, SyntaxError, EOFError,
  zlib.error...), hence the broad excepts around opening and decoding only.
  """
  with _opened_image(path, contents) as img:
    try:
      img.load()
    except Exception as e:  # pylint: disable=broad-except
      raise UndecodableFileError(f"{path}: does not decode as an image ({_one_line(e)})") from None
    yield img


@contextlib.contextmanager
def _opened_image(path, contents=None):
  """A PIL image of the file (its header read, its pixels not decoded)."""
  contents = read_file(path) if contents is None else contents
  try:
    img = Image.open(io.BytesIO(contents))
  except Image.UnidentifiedImageError:
    raise UndecodableFileError(f"{path}: does not decode as an image (not an image, or its header "
                               "is corrupt)") from None
  except Exception as e:  # pylint: disable=broad-except
    raise UndecodableFileError(f"{path}: does not decode as an image ({_one_line(e)})") from None
  with img:
    yield img


def _one_line(error):
  return " ".join(str(error).split()) or type(error).__name__


def tf_decoded(path, decode_fn, *args, **kwargs):
  """decode_fn(*args, **kwargs); run eagerly, a TensorFlow error is an UndecodableFileError naming path.

  PIL reads files that TensorFlow's decoders refuse (a PNG missing its last
  bytes or with a bad IDAT checksum, a GIF missing its last block, a 1-bit
  BMP), so the check decodes with the pipeline's own op: it then fails on
  exactly the files the pipeline would fail on.
  """
  try:
    return decode_fn(*args, **kwargs)
  except tf.errors.OpError as e:  # the op reads nothing but these bytes, so they are at fault
    raise UndecodableFileError(f"{path}: does not decode as an image (TensorFlow: {tf_reason(e)})") from None


def tf_reason(error):
  """The first line of a TensorFlow error, without the function and op names around it."""
  lines = str(error.message).strip().splitlines() or [type(error).__name__]
  reason = re.sub(r"^\{\{[^}]*\}\}\s*", "", lines[0])
  return re.sub(r"\s*\[Op:\w+\].*$", "", reason)


def check_image(path):
  """Decodes an image up front as the pipelines do; returns its PIL format, mode and (width, height).

  PIL reads the header (format, size; a clear line for formats TensorFlow does
  not read), TensorFlow decodes the pixels (see tf_decoded).
  """
  contents = read_file(path)
  with _opened_image(path, contents) as img:
    image_format, mode, size = img.format, img.mode, img.size
  if image_format not in TF_IMAGE_FORMATS:
    raise UndecodableFileError(
        f"{path}: {image_format} images are not read by TensorFlow; use {', '.join(TF_IMAGE_FORMATS)}")
  tf_decoded(path, decode_image, contents)
  return image_format, mode, size


def exif_orientation(path):
  """The EXIF orientation of a JPEG file (1: shown as stored; 2-8: shown turned or mirrored), which
  TensorFlow's decoders ignore; 1 for other formats."""
  with _opened_image(path) as img:
    return int(img.getexif().get(_EXIF_ORIENTATION, 1)) if img.format == "JPEG" else 1


def decode_image(contents, channels=3):
  """Encoded JPEG/PNG/BMP/GIF bytes -> uint8 [height, width, channels] (first frame of a GIF)."""
  image = tf.io.decode_image(contents, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  return image


def check_files(items, check_fn, skip_bad_files, name_fn=str, what="files"):
  """Runs `check_fn(item)` over `items` in a thread pool, in order.

  Args:
    items: what to check (paths, or tuples of paths).
    check_fn: item -> info; raises DataError for a bad item, UndecodableFileError
      for one that does not decode.
    skip_bad_files: skip, name and count undecodable items instead of raising;
      other DataErrors (inconsistent files) always raise.
    name_fn: item -> the name that the skip lines and the data report list.
    what: what the items are, for the log lines.

  Returns:
    (good_items, infos, skipped names), good_items and infos in the order of `items`.
  """
  items = list(items)
  good, infos, skipped = [], [], []
  for item, info, error in checked_stream(items, check_fn, skip_bad_files, what, len(items)):
    if error is None:
      good.append(item)
      infos.append(info)
    else:
      skipped.append(name_fn(item))
  log_skipped(skipped, len(items), what)
  return good, infos, skipped


def checked_stream(items, check_fn, skip_bad_files, what, total=None):
  """Yields (item, info, None) or (item, None, error) of every item, in order.

  The items are handed to the thread pool a chunk at a time, so that an
  iterator (the records of TFRecord files) is never read whole.
  """
  if total is None:
    log_every = 10 * _PROGRESS_MIN_ITEMS
  else:
    log_every = max(total // 10, 1) if total >= _PROGRESS_MIN_ITEMS else 0

  def checked(item):
    try:
      return check_fn(item), None
    except UndecodableFileError as e:
      if not skip_bad_files:
        raise UndecodableFileError(f"{e}; data.skip_bad_files=True skips such {what}") from None
      return None, e

  items = iter(items)
  count = 0
  with concurrent.futures.ThreadPoolExecutor(_NUM_CHECK_THREADS) as pool:
    try:
      for chunk in iter(lambda: list(itertools.islice(items, CHECK_CHUNK)), []):
        for item, (info, error) in zip(chunk, pool.map(checked, chunk)):
          if error is not None:
            logging.warning("skipping: %s", error)
          yield item, info, error
          count += 1
          if log_every and count % log_every == 0:
            logging.info("checked %s%s %s", f"{count:,}", f" of {total:,}" if total else "", what)
    except DataError:
      pool.shutdown(wait=True, cancel_futures=True)
      raise


def log_skipped(skipped, total, what):
  if not skipped:
    return
  names = ", ".join(skipped[:_MAX_NAMES_LOGGED]) + (", ..." if len(skipped) > _MAX_NAMES_LOGGED else "")
  logging.warning("skipped %s of %s %s that do not decode: %s", f"{len(skipped):,}", f"{total:,}", what,
                  names)


def check_images(paths, skip_bad_files):
  """Decodes every image up front; returns (good_paths, skipped names)."""
  good, _, skipped = check_files(paths, check_image, skip_bad_files)
  if not good:
    raise DataError(f"none of the {len(paths):,} images decode (first: {paths[0]})")
  return good, skipped


def skip_report(skipped):
  """The data report of what the checks skipped: {split: [names]} ->
  {"skipped_files": {split: count}, "skipped_names": the first names}."""
  names = [name for split_names in skipped.values() for name in split_names]
  return {"skipped_files": {split: len(split_names) for split, split_names in skipped.items()},
          "skipped_names": names[:_MAX_NAMES_REPORTED]}


def check_eval_size(where, size, max_pixels, setting="data.eval_max_pixels", tiles_key=None):
  """Refuses an image of (height, width) `size` over `max_pixels`, before any training or loading.

  Evaluation and prediction of a whole image hold activations that grow with its pixels (about
  300 bytes a pixel for segmentation's default network: 19 GB for 8000x8000); tiles_key: the key
  that evaluates it in tiles instead, named in the line.
  """
  height, width = size
  if height * width > max_pixels:
    tiles = f", or set {tiles_key} to evaluate it in tiles" if tiles_key else ""
    raise DataError(f"{where}: {height}x{width} is {height * width:,} pixels, more than "
                    f"{setting}={max_pixels:,}, the bound on the memory of one whole image; resize it "
                    f"or raise {setting}{tiles}")


def header_size(where, image):
  """(height, width) from the header of an image (a path or a file of its bytes), which PIL reads
  without decoding the pixels; None when it has no readable header (the decode check names it)."""
  try:
    with Image.open(image) as opened:
      return opened.height, opened.width
  except Image.DecompressionBombError as e:  # PIL's own bound, far above any evaluation's
    raise DataError(f"{where}: {e}") from None
  except Exception:  # pylint: disable=broad-except  # PIL raises many types for broken files
    return None
