"""Downloads TF-Slim's published Inception V4 checkpoint, checks it and extracts inception_v4.ckpt.

  python scripts/fetch_slim_checkpoint.py --output_dir=.
  python scripts/fetch_slim_checkpoint.py --output_dir=. --from_file=Downloads/inception_v4_2016_09_09.tar.gz

then train with --config.checkpoint_path=./inception_v4.ckpt.

The tarball is the one TF-Slim's README links (--url). It is downloaded to <output_dir>/<name>.part,
continued with an HTTP Range request after an interruption where the server allows it (else downloaded
again; a part the server says is already whole is checked as it is), and renamed to <name> once
complete: its size is the server's Content-Length (or --size), its
sha256 is printed and checked against --sha256 when given, and gzip's own CRC checks it again while
extracting. The checkpoint is extracted into a temporary folder (regular files only, nothing outside
it) and moved into --output_dir only once its 608 variables have TF-Slim's names and the shapes of this
repository's Inception V4 (1001 classes, aux head, 299x299). A checkpoint already there and checked is
not fetched again. Every failure is one line naming the file or address, exit code 2, and removes
nothing that was complete.
"""
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


from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from common.app import cli
from common.contract.errors import CheckpointError
from common.contract.errors import UserError
from inception_finetune import inception_v4
from inception_finetune import slim_checkpoint

PUBLISHED_URL = "http://download.tensorflow.org/models/inception_v4_2016_09_09.tar.gz"
# No published size or sha256 of the tarball could be found (TF-Slim's README gives none); the
# variables' names and shapes are the check that holds without them.
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
    report = check(target, f"; {target} is not replaced: move it away to fetch the published one")
    say(f"{target} is already there and holds the {len(report.loaded)} variables of TF-Slim's "
        "Inception V4: nothing to fetch")
    return target
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise FetchError(f"cannot create --output_dir {output_dir} ({e.strerror})") from None
  if from_file:
    tarball = from_file
    if not os.path.isfile(tarball):
      raise FetchError(f"--from_file {tarball} does not exist")
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
  request = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
  try:
    response = urllib.request.urlopen(request, timeout=_TIMEOUT_S)
  except urllib.error.HTTPError as e:
    if e.code != 416 or not done:
      raise FetchError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    # 416: no byte after the part's last, so the part is the whole file (its rename was missed) or
    # longer: the checks below tell.
    say(f"{part} is as long as {url}: checking it")
    response, total = None, size
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
    try:
      chunk = response.read(_CHUNK_BYTES)
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
      digest.update(chunk)
  actual = digest.hexdigest()
  if sha256 and actual != sha256.lower():
    raise FetchError(f"{path} has sha256 {actual}, not the expected {sha256}; it is kept: check --sha256, "
                     "or delete it and run again")
  say(f"{path}: {actual_size:,} bytes, sha256 {actual}" + (" (as expected)" if sha256 else " (not checked: "
                                                           "no --sha256)"))


def extract_checked(tarball, output_dir, say):
  """Extracts the checkpoint's files into a temporary folder, checks its variables, then moves them
  into output_dir."""
  with tempfile.TemporaryDirectory(prefix=".extracting-", dir=output_dir) as scratch:
    try:
      with tarfile.open(tarball, "r:gz") as tar:
        members = [m for m in tar.getmembers() if _is_checkpoint_file(os.path.basename(m.name))]
        if not members:
          raise FetchError(f"{tarball} holds no {slim_checkpoint.PUBLISHED_NAME} (it holds: "
                           f"{', '.join(tar.getnames()[:5]) or 'nothing'})")
        for member in members:  # flat, as TF-Slim's tarball is; the data filter refuses links and devices
          member.name = os.path.basename(member.name)
        tar.extractall(scratch, members=members, filter="data")
    except tarfile.FilterError as e:  # a link out of the folder, an absolute path, a device
      raise FetchError(f"{tarball}: {e}; refused, nothing extracted") from None
    except OSError as e:
      if e.filename:  # the output folder: full, read-only
        raise FetchError(f"cannot write {e.filename} ({e.strerror}); free some space or choose another "
                         "--output_dir") from None
      raise FetchError(f"{tarball} is not a complete .tar.gz ({e}); delete it and run again") from None
    except (tarfile.TarError, EOFError, zlib.error) as e:  # EOFError: truncated; zlib.error: corrupt
      raise FetchError(f"{tarball} is not a complete .tar.gz ({e}); delete it and run again") from None
    extracted = os.path.join(scratch, slim_checkpoint.PUBLISHED_NAME)
    report = check(extracted, f"; {tarball} is not TF-Slim's published checkpoint",
                   shown=f"{slim_checkpoint.PUBLISHED_NAME} in {tarball}")
    for name in sorted(os.listdir(scratch)):
      os.replace(os.path.join(scratch, name), os.path.join(output_dir, name))
  say(f"extracted {os.path.join(output_dir, slim_checkpoint.PUBLISHED_NAME)}: its {len(report.loaded)} "
      f"variables have TF-Slim's Inception V4 names and shapes ({len(report.unexpected)} others)")


def check(path, hint, shown=None):
  """RestoreReport of the checkpoint against the network TF-Slim published; an error names it as
  `shown` and ends with `hint`."""
  try:
    return slim_checkpoint.check_variables(published_network(), path)
  except CheckpointError as e:
    raise FetchError(str(e).replace(path, shown or path) + hint) from None


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
  try:
    path = fetch(_OUTPUT_DIR.value, _URL.value, _FROM_FILE.value, _SHA256.value, _SIZE.value,
                 say=lambda line: print(line, file=sys.stderr, flush=True))
  except UserError as e:
    cli.fail(str(e))
  print(f"train with --config.checkpoint_path={path}")


if __name__ == "__main__":
  app.run(main)
