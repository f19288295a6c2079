"""scripts/fetch_slim_checkpoint.py end to end on a tarball in TF-Slim's layout that the test makes,
served through file:// (and a local HTTP server that honours Range requests): nothing is downloaded."""
import errno
import http.server
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from common.app import cli
from common.runtime import signals
from helpers import REPO_ROOT
from helpers import free_port
from helpers import make_config
from helpers import run_python
from inception_finetune import slim_checkpoint
from scripts import fetch_slim_checkpoint as fetch_lib
from test_bad_inputs import run_like_the_cli
from test_inception_v4 import read_fixture_shapes

NAME = "inception_v4_2016_09_09.tar.gz"


def make_tarball(path, tensors):
  """A .tar.gz holding inception_v4.ckpt (V2: .index and .data) at its top, as TF-Slim's does; the
  checkpoint is also in <path>.checkpoint/."""
  folder = path.parent / f"{path.name}.checkpoint"
  slim_checkpoint.write_checkpoint(str(folder / slim_checkpoint.PUBLISHED_NAME), tensors)
  return tar_checkpoint(path, folder)


def tar_checkpoint(path, folder):
  """The checkpoint files of folder into path, a .tar.gz."""
  with tarfile.open(path, "w:gz", compresslevel=0) as tar:  # random weights do not compress: no time spent
    for name in sorted(os.listdir(folder)):
      if name.startswith(slim_checkpoint.PUBLISHED_NAME):
        tar.add(folder / name, arcname=name)
  return path


def flip_byte(path, offset):
  data = bytearray(path.read_bytes())
  data[offset] ^= 0x01
  path.write_bytes(bytes(data))


def checkpoint_files(folder):
  return sorted(name for name in os.listdir(folder) if name.startswith(slim_checkpoint.PUBLISHED_NAME))


@pytest.fixture(scope="module")
def published(module_tmp):
  """(tarball, its sha256, its size): random weights under the names and shapes of the checkpoint
  TF-Slim itself wrote (tests/data/inception_v4_slim_variables.tsv), 609 with global_step."""
  rng = np.random.default_rng(0)
  tensors = {name: rng.standard_normal(shape, dtype=np.float32)
             for name, shape in read_fixture_shapes().items()}
  tensors["global_step"] = np.int64(0)
  path = make_tarball(module_tmp("published") / NAME, tensors)
  sha256 = fetch_lib.hashlib.sha256(path.read_bytes()).hexdigest()
  return path, sha256, path.stat().st_size


def fetch(output_dir, **kwargs):
  """fetch() with its lines collected: (path, lines)."""
  lines = []
  return fetch_lib.fetch(str(output_dir), say=lines.append, **kwargs), lines


def assert_fetched(output_dir):
  target = output_dir / slim_checkpoint.PUBLISHED_NAME
  shapes = tf.train.load_checkpoint(str(target)).get_variable_to_shape_map()
  assert len(shapes) == 609 and shapes["InceptionV4/AuxLogits/Conv2d_2a/weights"] == [5, 5, 128, 768]
  assert not [name for name in os.listdir(output_dir) if name.startswith(".extracting-")]


def expect_error(match, output_dir, **kwargs):
  with pytest.raises(fetch_lib.FetchError, match=match) as error:
    fetch(output_dir, **kwargs)
  assert "\n" not in str(error.value)
  return str(error.value)


@pytest.mark.slow
def test_download_checks_extracts_and_is_not_repeated(published, tmp_path, monkeypatch):
  tarball, sha256, size = published
  monkeypatch.setattr(fetch_lib, "_PROGRESS_EVERY_S", 0.0)
  (tmp_path / f"{NAME}.part").write_bytes(tarball.read_bytes()[:size // 3])  # an interrupted download
  path, lines = fetch(tmp_path, url=tarball.as_uri(), sha256=sha256, size=size)
  # file:// answers no Range request: the part is downloaded again.
  assert f"{tarball.as_uri()} does not continue downloads: downloading it again, not from byte " \
         f"{size // 3:,}" in lines
  assert path == str(tmp_path / "inception_v4.ckpt")
  assert_fetched(tmp_path)
  assert (tmp_path / NAME).read_bytes() == tarball.read_bytes() and not (tmp_path / f"{NAME}.part").exists()
  assert f"{size / 1e6:.1f} of {size / 1e6:.1f} MB (100%)" in "\n".join(lines)  # progress lines
  assert f"{tmp_path / NAME}.part: {size:,} bytes, sha256 {sha256} (as expected)" in lines
  assert lines[-1].endswith("its 608 variables have TF-Slim's Inception V4 names and shapes (0 others), and "
                            "every tensor reads back")

  _, lines = fetch(tmp_path, url=(tmp_path / "nothing-there").as_uri())  # not fetched again
  assert lines == [f"{path} is already there and holds the 608 variables of TF-Slim's Inception V4, each "
                   "read back: nothing to fetch"]


@pytest.mark.slow
def test_a_download_cut_short_is_continued_by_a_range_request(published, tmp_path):
  tarball, sha256, size = published
  data = tarball.read_bytes()
  # An HTTP server that drops the first connection halfway, then honours the Range request.
  requests = []

  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
      start = int(self.headers.get("Range", "bytes=0-")[len("bytes="):].rstrip("-"))
      requests.append(start)
      if start >= size:
        self.send_error(416)
        return
      self.send_response(206 if start else 200)
      if start:
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
      self.send_header("Content-Length", str(size - start))
      self.end_headers()
      self.wfile.write(data[start:] if start else data[:size // 2])  # then closes: a dropped connection

    def log_message(self, *args):
      del args

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  url = f"http://127.0.0.1:{server.server_address[1]}/{NAME}"
  resumed = tmp_path / "resumed"
  try:
    expect_error(rf"the download of {url} stopped at {size // 2:,} of {size:,} bytes; .*{NAME}.part is "
                 "kept: run again to continue it", resumed, url=url, sha256=sha256)
    assert (resumed / f"{NAME}.part").stat().st_size == size // 2 and not (resumed / NAME).exists()
    _, lines = fetch(resumed, url=url, sha256=sha256)
    assert f"downloading {url} to {resumed / NAME}.part, continued from byte {size // 2:,}" in lines
    assert (resumed / NAME).read_bytes() == data
    assert_fetched(resumed)

    complete = tmp_path / "complete"  # a whole part whose rename was missed: nothing left to download
    complete.mkdir()
    (complete / f"{NAME}.part").write_bytes(data)
    _, lines = fetch(complete, url=url, sha256=sha256)
    assert f"{complete / NAME}.part is as long as {url}: checking it" in lines
    assert_fetched(complete)
  finally:
    server.shutdown()
  assert requests == [0, size // 2, size]


@pytest.mark.slow
def test_from_file_and_bad_inputs_are_one_line_and_delete_nothing_good(published, tmp_path):
  tarball, sha256, size = published
  nowhere = (tmp_path / "not-downloaded").as_uri()
  by_hand = tmp_path / "by_hand"
  fetch(by_hand, url=nowhere, from_file=str(tarball), sha256=sha256, size=size)
  assert_fetched(by_hand)
  assert not (by_hand / NAME).exists() and not (by_hand / f"{NAME}.part").exists() and tarball.is_file()

  wrong = tmp_path / "wrong"
  expect_error(rf"{NAME}.part has sha256 {sha256}, not the expected {'0' * 64}; it is kept", wrong,
               url=tarball.as_uri(), sha256="0" * 64)
  assert (wrong / f"{NAME}.part").stat().st_size == size and not (wrong / NAME).exists()
  assert not (wrong / "inception_v4.ckpt.index").exists()
  expect_error(rf"has {size:,} bytes, not the expected {size + 1:,}", tmp_path / "size",
               from_file=str(tarball), size=size + 1)

  truncated = tmp_path / "truncated.tar.gz"
  truncated.write_bytes(tarball.read_bytes()[:size * 2 // 3])
  out = tmp_path / "out"
  expect_error(rf"{truncated} is truncated or corrupt \(Compressed file ended before the end-of-stream "
               r"marker was reached\); nothing was installed: delete it and run again$", out,
               from_file=str(truncated))
  assert truncated.stat().st_size == size * 2 // 3 and os.listdir(out) == []

  few = make_tarball(tmp_path / "few" / NAME, {"InceptionV4/Conv2d_1a_3x3/weights": np.zeros((3, 3, 3, 32),
                                                                                            np.float32)})
  expect_error(rf"checkpoint inception_v4.ckpt in {few} has no variable .* \(nor 606 other model "
               rf"variables\); {few} is not TF-Slim's published checkpoint", out, from_file=str(few))
  assert os.listdir(out) == []

  linked = tmp_path / "linked.tar.gz"
  with tarfile.open(linked, "w:gz") as tar:
    link = tarfile.TarInfo(slim_checkpoint.PUBLISHED_NAME)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    tar.addfile(link)
    escaping = tarfile.TarInfo("../../inception_v4.ckpt.index")
    escaping.size = 4
    tar.addfile(escaping, io.BytesIO(b"evil"))
  expect_error(rf"{linked}: 'inception_v4.ckpt' is a link to an absolute path; refused, nothing extracted",
               out, from_file=str(linked))
  assert os.listdir(out) == [] and not (tmp_path.parent / "inception_v4.ckpt.index").exists()

  offline = f"http://127.0.0.1:{free_port()}/{NAME}"  # nothing listens there
  expect_error(rf"cannot download {offline} \(.*refused.*\); check the network, or download it by hand and "
               "pass --from_file", out, url=offline)

  kept = tmp_path / "kept"  # a sound checkpoint of another network is the user's: left alone
  slim_checkpoint.write_checkpoint(str(kept / "inception_v4.ckpt"), {"resnet_v1_50/conv1/weights": np.ones(
      (7, 7, 3, 64), np.float32)})
  before = {name: (kept / name).read_bytes() for name in os.listdir(kept)}
  expect_error(rf"checkpoint {kept}/inception_v4.ckpt is not a TF-Slim InceptionV4 checkpoint.*; "
               rf"{kept}/inception_v4.ckpt is not replaced: move it away", kept, from_file=str(tarball))
  assert {name: (kept / name).read_bytes() for name in os.listdir(kept)} == before


@pytest.mark.slow
def test_the_trainers_error_names_the_command_that_fetches_it(published, tmp_path, capsys):
  tarball, _, _ = published
  checkpoints = tmp_path / "checkpoints"
  config = make_config("inception_v4", "smoke", checkpoint_path=str(checkpoints / "inception_v4.ckpt"))
  code, lines = run_like_the_cli("inception_v4", config, str(tmp_path / "run"), capsys)
  assert code == 2, lines
  command = f"python scripts/fetch_slim_checkpoint.py --output_dir={checkpoints}"
  assert lines[-1] == (f"error: checkpoint {checkpoints / 'inception_v4.ckpt'} does not exist; TF-Slim's "
                       f"published Inception V4 one is fetched and checked by `{command}`, then pass "
                       f"--config.checkpoint_path={checkpoints / 'inception_v4.ckpt'}"), lines

  fetched = run_python(shlex.split(command)[1:] + [f"--url={tarball.as_uri()}"])
  assert fetched.returncode == 0, fetched.stderr[-2000:]
  assert fetched.stdout.strip() == f"train with --config.checkpoint_path={checkpoints / 'inception_v4.ckpt'}"
  assert_fetched(checkpoints)


@pytest.mark.slow
def test_a_flipped_byte_is_refused_and_installs_nothing(published, tmp_path):
  tarball, _, size = published
  out = tmp_path / "out"
  # In the compressed stream: the middle (a tensor's bytes), and the tar's zero padding after its
  # last member, which tarfile never reads: only gzip's CRC, read to the stream's end, sees it.
  for offset in (size // 2, size - 100):
    flipped = tmp_path / f"flipped-{offset}.tar.gz"
    shutil.copy(tarball, flipped)
    flip_byte(flipped, offset)
    expect_error(rf"^{flipped} is truncated or corrupt \(CRC check failed 0x[0-9a-f]+ != 0x[0-9a-f]+\); "
                 "nothing was installed: delete it and run again$", out, from_file=str(flipped))
    assert os.listdir(out) == []

  # A whole gzip stream around a checkpoint whose .data has one byte changed: TensorFlow's checksum
  # of that tensor, read back once, refuses it.
  folder = tmp_path / "damaged"
  shutil.copytree(tarball.parent / f"{NAME}.checkpoint", folder)
  data = folder / "inception_v4.ckpt.data-00000-of-00001"
  flip_byte(data, data.stat().st_size // 2)
  damaged = tar_checkpoint(tmp_path / NAME, folder)
  expect_error(rf"^checkpoint inception_v4.ckpt in {damaged} is corrupt or incomplete: InceptionV4/\S+ does "
               rf"not read back \(.*Checksum does not match.*\); {damaged} is not TF-Slim's published "
               "checkpoint$", out, from_file=str(damaged))
  assert os.listdir(out) == []


@pytest.mark.slow
def test_a_broken_checkpoint_in_the_output_dir_is_replaced(published, tmp_path):
  tarball, _, _ = published
  index_only = tmp_path / "index_only"  # its .data file never arrived
  index_only.mkdir()
  shutil.copy(tarball.parent / f"{NAME}.checkpoint" / "inception_v4.ckpt.index", index_only)
  _, lines = fetch(index_only, from_file=str(tarball))
  assert re.fullmatch(rf"checkpoint {index_only}/inception_v4.ckpt is corrupt or incomplete: InceptionV4/\S+ "
                      r"does not read back \(.*No such file or directory\); replacing it with the published "
                      "one", lines[0]), lines
  assert lines[-1].startswith(f"extracted {index_only / 'inception_v4.ckpt'}: its 608 variables")
  assert_fetched(index_only)

  garbage = tmp_path / "garbage"  # a V1 file that is no checkpoint: removed, not left beside the V2 one
  garbage.mkdir()
  (garbage / "inception_v4.ckpt").write_bytes(b"not a checkpoint")
  _, lines = fetch(garbage, from_file=str(tarball))
  assert lines[0].startswith(f"checkpoint {garbage}/inception_v4.ckpt is unreadable: ") and \
         lines[0].endswith("; replacing it with the published one"), lines
  assert_fetched(garbage)
  assert checkpoint_files(garbage) == ["inception_v4.ckpt.data-00000-of-00001", "inception_v4.ckpt.index"]


@pytest.fixture
def small(tmp_path):
  """A tarball in TF-Slim's layout with one small tensor: enough for what fails before the checks."""
  return make_tarball(tmp_path / "small" / NAME, {"InceptionV4/Conv2d_1a_3x3/weights": np.ones(
      (3, 3, 3, 32), np.float32)})


def test_a_full_disk_while_extracting_keeps_the_download(small, tmp_path, monkeypatch):
  out = tmp_path / "out"

  def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(tarfile, "copyfileobj", disk_full)  # what tarfile writes a member's bytes with
  message = expect_error(
      rf"^cannot write {out}/inception_v4.ckpt.data-00000-of-00001 \(No space left on device\); the disk is "
      rf"full: free some space or choose another --output_dir; {out / NAME} is kept: run again$", out,
      url=small.as_uri())
  assert "delete" not in message
  assert (out / NAME).read_bytes() == small.read_bytes() and os.listdir(out) == [NAME]


def test_a_read_only_output_dir_keeps_the_tarball(small, read_only_dir):
  folder, reason = read_only_dir
  expect_error(rf"^cannot write {folder} \({reason}\); it is not writable: make it writable or choose "
               rf"another --output_dir; {small} is kept: run again$", folder, from_file=str(small))
  assert small.is_file()


def test_a_bad_url_and_an_interrupted_extraction_are_one_line(small, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:  # as the command line runs it
    cli.run_guarded(fetch_lib.fetch, str(tmp_path / "out"), "notaurl")
  assert exit_info.value.code == 2
  assert capsys.readouterr().err.strip().splitlines() == [
      "error: --url notaurl is not a download address (unknown url type: 'notaurl'); give an http(s):// or "
      "file:// one"]

  out = tmp_path / "interrupted"

  def say(line):  # SIGTERM once the tarball is checked: the extraction stops at its first member
    if "sha256" in line:
      os.kill(os.getpid(), signal.SIGTERM)

  with signals.recording(), pytest.raises(signals.Interrupted) as error:
    fetch_lib.fetch(str(out), from_file=str(small), say=say)
  assert str(error.value) == (f"interrupted by SIGTERM while extracting {small}; nothing was installed and "
                              f"{small} is kept: run again")
  assert os.listdir(out) == []


@pytest.fixture
def slow_server():
  """The URL of a tarball that an HTTP server sends a KB at a time, 20 ms apart (10 MB announced)."""
  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
      self.send_response(200)
      self.send_header("Content-Length", str(10 << 20))
      self.end_headers()
      try:
        for _ in range(10 << 10):
          self.wfile.write(b"\0" * 1024)
          self.wfile.flush()
          time.sleep(0.02)
      except OSError:  # the client went away
        pass

    def log_message(self, *args):
      del args

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{server.server_address[1]}/{NAME}"
  server.shutdown()


@pytest.mark.slow  # a command line each (TensorFlow's import: 5-10 s)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_download_is_one_line_and_keeps_the_part(slow_server, tmp_path, signum):
  part = tmp_path / f"{NAME}.part"
  # As a user runs it: without TF_CPP_MIN_LOG_LEVEL, whose start-up lines the command holds back.
  env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
  command = ["scripts/fetch_slim_checkpoint.py", f"--output_dir={tmp_path}", f"--url={slow_server}"]
  fetching = subprocess.Popen([sys.executable] + command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
                              env=env)
  deadline = time.monotonic() + 120
  while not (part.is_file() and part.stat().st_size) and fetching.poll() is None:
    assert time.monotonic() < deadline, "no download started"
    time.sleep(0.1)
  fetching.send_signal(signum)
  _, stderr = fetching.communicate(timeout=60)
  assert fetching.returncode == 128 + signum, stderr[-3000:]
  lines = [line for line in stderr.splitlines() if not line.startswith(("downloading ", "  "))]  # progress
  kept = part.stat().st_size
  assert lines == [f"interrupted by {signal.Signals(signum).name} during the download of {slow_server}; "
                   f"{part} is kept ({kept:,} bytes): run again to continue it"], stderr[-3000:]
  assert 0 < kept < 10 << 20 and not (tmp_path / NAME).exists()
