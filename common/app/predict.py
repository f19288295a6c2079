"""What the trainers' predict commands share: their flags, the model they read (a run's best weights,
else its newest checkpoint, with the run's config.json; or a SavedModel), the photos (listed from
folders, bounded by --max_pixels, read as a viewer shows them, a bad or oversize file one line as in
training and left out) and the table they print and write as CSV. Nothing is written but where the
user's flags say, never over a file that exists (check_new), and a command that stops before writing
there leaves no folder it made."""
import contextlib
import csv
import os

from absl import flags
from absl import logging

from common.app import cli
from common.contract.errors import DataError
from common.contract.errors import WorkdirError
from common.data import photos
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import checkpoints


def define_flags(trainer, default_config, default_workdir, max_pixels_default=None):
  """--config, --workdir, --saved_model and --max_pixels (its default described by
  max_pixels_default, else photos.MAX_PIXELS); returns their flag holders."""
  config_flag, workdir_flag = cli.define_flags(default_config, default_workdir)
  saved_model_flag = flags.DEFINE_string("saved_model", None, f"A SavedModel written by {trainer}.train, "
                                         "instead of --workdir's weights.")
  max_pixels_flag = flags.DEFINE_integer(
      "max_pixels", None, "Larger photos are refused from their headers before the model loads; default "
      f"{max_pixels_default or f'{photos.MAX_PIXELS:,}, where PIL warns of a decompression bomb'}.",
      lower_bound=1)
  return config_flag, workdir_flag, saved_model_flag, max_pixels_flag


def restore_weights(model, workdir):
  """Restores the weights a run serves (checkpoints.restore_served: best/, else its newest
  checkpoint); returns the checkpoint's path."""
  path = checkpoints.restore_served(model, workdir)
  logging.info("predicting with %s", path)
  return path


def checkpoint_step(path):
  """The step of a run's checkpoint (its number: the loop saves each at its step)."""
  return int(path.rsplit("-", 1)[1])


def load_saved_model(path, outputs, trainer):
  """The loaded SavedModel of `trainer` (its Task.name), whose serving signature gives `outputs`
  (checkpoints.load_saved_model)."""
  logging.info("predicting with %s", path)
  return checkpoints.load_saved_model(path, outputs, trainer)


def photo_paths(args, max_pixels=None, tiles_key=None, outputs=()):
  """The photo files of the command's arguments (a folder: its photos, less the files named as its
  photos' outputs: a name stem of one of them and a suffix of `outputs`), each one's pixels checked
  from its header against max_pixels (default photos.MAX_PIXELS) before the model loads: a lone
  photo over it is the command's one line (naming tiles_key, the config key that would tile it);
  among others, Photos names it and goes on, unless all are over it."""
  paths = _without_outputs(photos.photo_paths(args), outputs)
  over = []
  for path in paths:
    try:
      photos.check_pixels(path, max_pixels, tiles_key)
    except DataError as e:
      if len(paths) == 1:
        raise
      over.append(str(e))
  if over and len(over) == len(paths):
    for line in over:
      cli.print_error(line)
    raise DataError(f"all {len(paths)} photos are over --max_pixels (each named above); nothing was written")
  return paths


def _without_outputs(paths, outputs):
  """paths less those named <stem><output suffix> beside a photo of that stem (a command's outputs,
  written into the photos' folder by an earlier run), which are logged."""
  stems = {os.path.splitext(path)[0] for path in paths}
  kept = [path for path in paths if not any(path.endswith(suffix) and path[:-len(suffix)] in stems
                                            for suffix in outputs)]
  if len(kept) < len(paths):
    logging.warning("left out %d files named as the outputs of photos beside them (their %s), e.g. %s",
                    len(paths) - len(kept), ", ".join(outputs), next(p for p in paths if p not in kept))
  return kept


def check_new(paths, flag):
  """One line, before the model loads, when one of the files a command is to write (paths, given by
  flag) exists: predict never writes over a file it did not make in this run (a user's, or an
  earlier run's)."""
  for path in paths:
    if path and os.path.lexists(path):
      raise WorkdirError(f"{path} exists; predict writes only new files, never over a user's or an earlier "
                         f"run's: choose another {flag}, or move the file away")


class Photos:
  """The photos of photo_paths, read one at a time as a viewer shows them (EXIF orientation applied).

  A photo that does not read (missing, not an image, cut short, over max_pixels) is named in an `error:` line when met
  and left out, so that the others still get their results; the command then gives them and calls
  finish(), which ends it with exit code 2 saying how many were done. When no photo reads the
  reading stops there (the one photo's own line when it was one). Before each photo a signal stops
  the command (a safe point), with what written(photos read so far) says.
  """

  def __init__(self, paths, max_pixels=None, written=lambda done: "nothing was written", tiles_key=None):
    self.paths, self._max_pixels, self._written, self._tiles_key = paths, max_pixels, written, tiles_key
    self.read = []  # the positions in paths of the photos that read

  def __iter__(self):
    logging.info("photos are read as a photo viewer shows them: EXIF orientation applied (PIL's "
                 "ImageOps.exif_transpose)")
    for position, path in enumerate(self.paths):
      signals.check(f"after {position} of {len(self.paths)} photos; {self._written_so_far()}")
      try:
        image, orientation = photos.read_photo(path, self._max_pixels, self._tiles_key)
      except DataError as e:
        if len(self.paths) == 1:  # a count would only repeat its line
          raise
        cli.print_error(str(e))
        continue
      if orientation != 1:
        logging.info("%s: EXIF orientation %d, turned upright as a viewer shows it", path, orientation)
      self.read.append(position)
      yield path, image
    if not self.read:
      raise DataError(f"none of the {len(self.paths)} photos read (each named above); nothing was written")

  def _written_so_far(self):
    return self._written(len(self.read)) if self.read else "nothing was written"

  def finish(self, given):
    """After the command gave the results of the photos that read (`given` says where): a DataError
    when some did not."""
    left_out = len(self.paths) - len(self.read)
    if left_out:
      raise DataError(f"{left_out} of {len(self.paths)} photos did not read (each named above); {given}")


@contextlib.contextmanager
def checked_paths(saved_model, folders):
  """Before the model loads: a --saved_model that is not one, then the output folders ({flag:
  folder, None where not given}) can be written, each one line naming the path and the flag; then
  the block, the command's work: one that stops leaves no folder these checks made and nothing was
  written into (workdir_lib.checked_writable)."""
  if saved_model:
    workdir_lib.check_saved_model(saved_model)
  with workdir_lib.checked_writable(folders):
    yield


def folder_of(path):
  """The folder an output file goes into (None for None)."""
  return path and os.path.dirname(os.path.abspath(path))


def show_table(header, rows, output=None, flag="--output"):
  """Prints rows under header as aligned columns (floats with 4 decimals); with output, writes them
  as CSV there too."""
  cells = [list(header)] + [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row] for row in rows]
  widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
  print("\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells), flush=True)
  if output:
    # "x": a new file (check_new), not one made meanwhile by another command.
    with workdir_lib.writing(output, flag=flag), open(output, "x", newline="", encoding="utf-8") as f:
      csv.writer(f).writerows([header] + [list(row) for row in rows])
    logging.info("wrote %s", output)
