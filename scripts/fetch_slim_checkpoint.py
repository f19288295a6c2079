"""Downloads TF-Slim's published Inception V4 checkpoint, checks it and extracts inception_v4.ckpt.

  python scripts/fetch_slim_checkpoint.py --output_dir=.
  python scripts/fetch_slim_checkpoint.py --output_dir=. --from_file=Downloads/inception_v4_2016_09_09.tar.gz

then train with --config.checkpoint_path=./inception_v4.ckpt.

The tarball is the one TF-Slim's README links (--url). It is downloaded to <output_dir>/<name>.part,
continued with an HTTP Range request after an interruption where the server allows it (else downloaded
again; a part the server says is already whole is checked as it is), and renamed to <name> once
complete: its size is the server's Content-Length (or --size), its sha256 is printed and checked against
--sha256 when given. The checkpoint's files are extracted into a temporary folder (regular files only,
nothing outside it) and the gzip stream is read to its end, so that gzip's CRC checks every byte of
the tarball. The checkpoint is moved into --output_dir only once its 608 variables have TF-Slim's
names and the shapes of this repository's Inception V4 (1001 classes, aux head, 299x299) and every
tensor has been read back once (TensorFlow checks each one's checksum).

A checkpoint already in --output_dir is checked the same way: a sound one is not fetched again; a
broken one (its .data file missing, a tensor that does not read back, an unreadable index) is said
so in one line and replaced; one that is sound but not TF-Slim's Inception V4 is left alone (error).
Every failure (a bad --url included) is one line naming the file or address, exit code 2, and
removes nothing that was complete: a tarball that cannot be extracted for lack of space or of write
permission is kept, and the line says which (a truncated or corrupt one is to be deleted). Ctrl-C or
SIGTERM is handled as the trainers handle it (common/runtime/signals.py): at the next chunk read,
tensor checked or member extracted, one line `interrupted by SIGINT ...` saying what is kept, exit 128
+ N; a .part is kept and running again continues it. A stalled download notices it when the next
bytes arrive (or the 60 s timeout passes); a second Ctrl-C exits at once.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import contextlib  # pylint: disable=g-import-not-at-top,g-bad-import-order
import functools
import hashlib
import http.client
import os
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib

from absl import flags

from common.app import cli
from common.contract.errors import CheckpointError
from common.contract.errors import UserError
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from inception_finetune import inception_v4
from inception_finetune import slim_checkpoint

PUBLISHED_URL = "http://download.tensorflow.org/models/inception_v4_2016_09_09.tar.gz"
# No published size or sha256 of the tarball could be found (TF-Slim's README gives none); gzip's
# CRC, the tensors' checksums and the variables' names and shapes are the checks that hold without them.
_OUTPUT_DIR = flags.DEFINE_string("output_dir", ".", f"Where {slim_checkpoint.PUBLISHED_NAME} (and the "
                                  "downloaded tarball) go.")
_URL = flags.DEFINE_string("url", PUBLISHED_URL, "Where the tarball is downloaded from.")
_FROM_FILE = flags.DEFINE_string("from_file", None, "A tarball downloaded by hand: nothing is downloaded.")
_SHA256 = flags.DEFINE_string("sha256", "", "The tarball's expected sha256 (hex); empty: printed, not "
                              "checked.")
_SIZE = flags.DEFINE_integer("size", 0, "The tarball's expected size in bytes; 0: the server's "
                             "Content-Length.", lower_bound=0)

_CHUNK_BYTES = 1 << 20
_PROGRESS_EVERY_S = 2.0
_TIMEOUT_S = 60


class FetchError(UserError):
  """The download, the tarball or its checkpoint is not what it should be."""


def fetch(output_dir, url=PUBLISHED_URL, from_file=None, sha256="", size=0, say=print):
  """Makes <output_dir>/inception_v4.ckpt the checked published checkpoint; returns its path."""
  target = os.path.join(output_dir, slim_checkpoint.PUBLISHED_NAME)
  if _checkpoint_files(output_dir):
    try:
      report = check(target, f"while checking {target}; nothing was changed")
      say(f"{target} is already there and holds the {len(report.loaded)} variables of TF-Slim's "
          "Inception V4, each read back: nothing to fetch")
      return target
    except slim_checkpoint.CorruptCheckpointError as e:
      say(f"{e}; replacing it with the published one")
    except CheckpointError as e:
      raise FetchError(f"{e}; {target} is not replaced: move it away to fetch the published one") from None
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise FetchError(f"cannot create --output_dir {output_dir} ({e.strerror})") from None
  if from_file:
    tarball = from_file
    if not os.path.isfile(tarball):
      what = "is a folder, not the tarball" if os.path.isdir(tarball) else "does not exist"
      raise FetchError(f"--from_file {tarball} {what}")
    check_file(tarball, sha256, size, say)
  else:
    tarball = os.path.join(output_dir, os.path.basename(PUBLISHED_URL))
    if os.path.isfile(tarball):
      say(f"{tarball} was downloaded before")
      check_file(tarball, sha256, size, say)
    else:
      download(url, tarball, sha256, size, say)
  extract_checked(tarball, output_dir, say)
  return target


def download(url, tarball, sha256, size, say):
  """Downloads url to tarball + ".part" (continued where it stopped if the server allows ranges),
  checks it, then renames it to tarball."""
  part = tarball + ".part"
  done = os.path.getsize(part) if os.path.isfile(part) else 0
  try:
    request = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
    response = urllib.request.urlopen(request, timeout=_TIMEOUT_S)
  except urllib.error.HTTPError as e:
    if e.code != 416 or not done:
      raise FetchError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    # 416: no byte after the part's last, so the part is the whole file (its rename was missed) or
    # longer: the checks below tell.
    say(f"{part} is as long as {url}: checking it")
    response, total = None, size
  except ValueError as e:  # not a URL
    raise FetchError(f"--url {url} is not a download address ({e}); give an http(s):// or file:// one") \
        from None
  except (urllib.error.URLError, OSError) as e:
    reason = getattr(e, "reason", None) or e
    raise FetchError(f"cannot download {url} ({reason}); check the network, or download it by hand "
                     "and pass --from_file") from None
  if response:
    with response:
      resumed = done and response.status == 206
      if done and not resumed:
        say(f"{url} does not continue downloads: downloading it again, not from byte {done:,}")
        done = 0
      remaining = response.headers.get("Content-Length")
      total = size or (done + int(remaining) if remaining is not None else None)
      say(f"downloading {url} to {part}" + (f", continued from byte {done:,}" if resumed else ""))
      with _writing(part, "; what it holds is kept: run again to continue it"):
        with open(part, "ab" if resumed else "wb") as f:
          done = _copy(response, f, done, total, url, part, say)
    if total is not None and done < total:
      raise FetchError(f"the download of {url} stopped at {done:,} of {total:,} bytes; {part} is kept: "
                       "run again to continue it")
  check_file(part, sha256, total, say)
  os.replace(part, tarball)
  say(f"downloaded {tarball}")


def _copy(response, f, done, total, url, part, say):
  """Copies the response into f with a progress line every few seconds; returns the bytes in f."""
  start, last, first = time.monotonic(), time.monotonic(), done
  while True:
    # Between chunks: the part holds whole chunks, and the next run continues after them.
    signals.check(f"during the download of {url}; {part} is kept ({done:,} bytes): run again to "
                  "continue it")
    try:
      chunk = response.read1(_CHUNK_BYTES)  # what has arrived, so that a signal waits for no full MB
    except (OSError, http.client.HTTPException) as e:  # a dropped connection, a timeout
      f.flush()
      raise FetchError(f"the download of {url} stopped at {done:,} bytes ({e}); {part} is kept: run "
                       "again to continue it") from None
    if not chunk:
      return done
    f.write(chunk)
    done += len(chunk)
    now = time.monotonic()
    if now - last >= _PROGRESS_EVERY_S:
      last = now
      rate = (done - first) / max(now - start, 1e-9)
      of = f" of {total / 1e6:.1f} MB ({100 * done / total:.0f}%)" if total else " MB"
      eta = f", {(total - done) / max(rate, 1):.0f} s to go" if total else ""
      say(f"  {done / 1e6:.1f}{of} at {rate / 1e6:.1f} MB/s{eta}")


def check_file(path, sha256, size, say):
  """The tarball's size when known and its sha256 when given; prints both either way."""
  actual_size = os.path.getsize(path)
  if size and actual_size != size:
    raise FetchError(f"{path} has {actual_size:,} bytes, not the expected {size:,}: truncated or another "
                     "file")
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
      signals.check(f"while checking {path}; it is kept: run again to check it")
      digest.update(chunk)
  actual = digest.hexdigest()
  if sha256 and actual != sha256.lower():
    raise FetchError(f"{path} has sha256 {actual}, not the expected {sha256}; it is kept: check --sha256, "
                     "or delete it and run again")
  say(f"{path}: {actual_size:,} bytes, sha256 {actual}" + (" (as expected)" if sha256 else " (not checked: "
                                                           "no --sha256)"))


def extract_checked(tarball, output_dir, say):
  """Extracts the checkpoint's files into a temporary folder, checks the whole gzip stream and every
  tensor, then moves them into output_dir in place of any broken checkpoint there."""
  interrupted = f"while extracting {tarball}; nothing was installed and {tarball} is kept: run again"
  kept = f"; {tarball} is kept: run again"
  with _writing(output_dir, kept):
    scratch_dir = tempfile.TemporaryDirectory(prefix=".extracting-", dir=output_dir)
  with scratch_dir as scratch:
    names = _extract(tarball, scratch, output_dir, interrupted, kept)
    report = check(os.path.join(scratch, slim_checkpoint.PUBLISHED_NAME), interrupted,
                   f"; {tarball} is not TF-Slim's published checkpoint",
                   shown=f"{slim_checkpoint.PUBLISHED_NAME} in {tarball}")
    with _writing(output_dir, kept):
      for name in set(_checkpoint_files(output_dir)) - set(names):  # a broken one's files left over
        os.remove(os.path.join(output_dir, name))
      for name in names:
        os.replace(os.path.join(scratch, name), os.path.join(output_dir, name))
  say(f"extracted {os.path.join(output_dir, slim_checkpoint.PUBLISHED_NAME)}: its {len(report.loaded)} "
      f"variables have TF-Slim's Inception V4 names and shapes ({len(report.unexpected)} others), and "
      "every tensor reads back")


def _extract(tarball, scratch, output_dir, interrupted, kept):
  """Extracts the checkpoint's files of tarball into scratch (flat, as TF-Slim's tarball is), then
  reads the gzip stream to its end: tarfile stops at the last member, before gzip's CRC; returns
  the names extracted."""
  names = []
  try:
    with tarfile.open(tarball, "r:gz") as tar:
      for member in tar:
        signals.check(interrupted)
        name = os.path.basename(member.name)
        if _is_checkpoint_file(name):
          with _writing(os.path.join(output_dir, name), kept):  # a full disk, a read-only folder
            # The data filter refuses links out of the folder, absolute paths and devices.
            tar.extract(member.replace(name=name), scratch, filter="data")
          names.append(name)
      while tar.fileobj.read(_CHUNK_BYTES):  # to gzip's end, where its CRC and length are checked
        signals.check(interrupted)
      if not names:
        raise FetchError(f"{tarball} holds no {slim_checkpoint.PUBLISHED_NAME} (it holds: "
                         f"{', '.join(tar.getnames()[:5]) or 'nothing'})")
  except tarfile.FilterError as e:
    raise FetchError(f"{tarball}: {e}; refused, nothing extracted") from None
  except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
    if isinstance(e, OSError) and e.errno is not None:  # reading the tarball (writes are _writing's)
      raise FetchError(f"cannot read {tarball} ({e.strerror})") from None
    # EOFError: truncated; zlib.error, gzip.BadGzipFile (an OSError without errno): corrupt.
    raise FetchError(f"{tarball} is truncated or corrupt ({e}); nothing was installed: delete it and run "
                     "again") from None
  return names


@contextlib.contextmanager
def _writing(path, then):
  """An OS error writing path (a full disk, a read-only folder) as one line naming it, ending with
  `then`: what was kept."""
  try:
    yield
  except OSError as e:
    if e.errno is None:  # gzip's BadGzipFile: the tarball's fault, not the disk's
      raise
    raise FetchError(workdir_lib.os_error_line(path, e, "--output_dir") + then) from None


def check(path, interrupted, hint="", shown=None):
  """RestoreReport of the checkpoint against the network TF-Slim published, after reading back every
  tensor (`interrupted`: what a signal meanwhile says). With `shown`, an error is a FetchError naming
  the checkpoint so and ending with `hint`; without, the CheckpointError itself, so that fetch() tells
  a broken checkpoint (a CorruptCheckpointError) from another network's."""
  try:
    report = slim_checkpoint.check_variables(published_network(), path)
    reader, shapes = slim_checkpoint.read_variable_shapes(path)
    for name in sorted(shapes):
      signals.check(interrupted)
      slim_checkpoint.read_tensor(reader, path, name)
    return report
  except CheckpointError as e:
    if not shown:
      raise
    raise FetchError(str(e).replace(path, shown) + hint) from None


@functools.lru_cache(maxsize=1)
def published_network():
  """The Inception V4 the published checkpoint holds: 1001 classes, aux head, 299x299 (608 variables)."""
  return inception_v4.inception_v4(num_classes=1001, input_shape=(299, 299, 3), aux_logits=True)


def _is_checkpoint_file(name):
  """inception_v4.ckpt (V1, TF-Slim's format) or inception_v4.ckpt.index / .data-* (V2)."""
  return name == slim_checkpoint.PUBLISHED_NAME or name.startswith(slim_checkpoint.PUBLISHED_NAME + ".")


def _checkpoint_files(folder):
  return [name for name in os.listdir(folder) if _is_checkpoint_file(name)] if os.path.isdir(folder) else []


def main(argv):
  del argv
  path = fetch(_OUTPUT_DIR.value, _URL.value, _FROM_FILE.value, _SHA256.value, _SIZE.value,
               say=lambda line: print(line, file=sys.stderr, flush=True))
  print(f"train with --config.checkpoint_path={path}")


if __name__ == "__main__":
  cli.run(main)  # the trainers' exits: a UserError is one line and exit 2, a signal one line and 128 + N
