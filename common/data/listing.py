"""Listing and reading files: names in a folder, files by extension, a file's bytes, and the
fingerprint of a list of files."""
import hashlib
import os

from absl import logging

from common.contract.errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


class UndecodableFileError(DataError):
  """A file that does not decode; `skip_bad_files` may skip it."""


def file_names(directory):
  """Sorted names of the files directly in `directory`, hidden ones left out.

  A symbolic link whose target is gone counts as a file, so that the checks
  name it (read_file) rather than the listing drop it silently.
  """
  return sorted(name for name in os.listdir(directory) if not name.startswith(".") and (
      os.path.isfile(os.path.join(directory, name)) or not os.path.exists(os.path.join(directory, name))))


def list_files(directory, extensions):
  """Sorted paths of the files directly in `directory` whose names end with one of `extensions`."""
  if not os.path.isdir(directory):
    raise DataError(f"{directory}: no such directory")
  suffixes = tuple(e.lower() for e in extensions)
  files = file_names(directory)
  paths = [os.path.join(directory, name) for name in files if name.lower().endswith(suffixes)]
  if not paths:
    raise DataError(f"{directory}: no files ending in {', '.join(suffixes)}")
  others = [name for name in files if not name.lower().endswith(suffixes)]
  if others:  # not silently: a photo saved as .webp, say, would be missed
    logging.warning("%s: left out %d files not ending in %s, e.g. %s", directory, len(others),
                    ", ".join(suffixes), others[0])
  return paths


def read_file(path, what="file"):
  """The bytes of a file; a DataError names a missing file, a folder or an unreadable file, an
  UndecodableFileError (which data.skip_bad_files skips) a symbolic link to nothing."""
  try:
    with open(path, "rb") as f:
      return f.read()
  except FileNotFoundError:
    if os.path.islink(path):
      raise UndecodableFileError(f"{path}: a symbolic link to {os.readlink(path)}, which does not "
                                 "exist") from None
    raise DataError(f"{path}: no such {what}") from None
  except IsADirectoryError:
    raise DataError(f"{path}: a folder, expected a {what}") from None
  except OSError as e:
    raise DataError(f"{path}: cannot read the {what} ({e.strerror})") from None


def files_fingerprint(paths):
  """'<n> files, <digest>' of an ordered list of files, for a checkpoint's input fingerprint.

  Adding, removing or renaming a file changes it; rewriting one, or moving the
  whole folder, does not (names count relative to the files' common folder).
  """
  root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0]) if paths else ""
  names = [os.path.relpath(path, root) for path in paths]
  digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]
  return f"{len(paths)} files, {digest}"
