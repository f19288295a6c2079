"""scripts/fetch_slim_checkpoint.py end to end on a tarball in TF-Slim's layout that the test makes,
served through file:// (and a local HTTP server that honours Range requests): nothing is downloaded."""
import http.server
import io
import os
import shlex
import tarfile
import threading

import numpy as np
import pytest
import tensorflow as tf

from helpers import free_port
from helpers import make_config
from helpers import run_python
from inception_finetune import slim_checkpoint
from scripts import fetch_slim_checkpoint as fetch_lib
from test_bad_inputs import run_like_the_cli
from test_inception_v4 import read_fixture_shapes

NAME = "inception_v4_2016_09_09.tar.gz"


def make_tarball(path, tensors):
  """A .tar.gz holding inception_v4.ckpt (V2: .index and .data) at its top, as TF-Slim's does."""
  folder = path.parent / f"{path.name}.checkpoint"
  slim_checkpoint.write_checkpoint(str(folder / slim_checkpoint.PUBLISHED_NAME), tensors)
  with tarfile.open(path, "w:gz", compresslevel=0) as tar:  # random weights do not compress: no time spent
    for name in sorted(os.listdir(folder)):
      if name.startswith(slim_checkpoint.PUBLISHED_NAME):
        tar.add(folder / name, arcname=name)
  return path


@pytest.fixture(scope="module")
def published(tmp_path_factory):
  """(tarball, its sha256, its size): random weights under the names and shapes of the checkpoint
  TF-Slim itself wrote (tests/data/inception_v4_slim_variables.tsv), 609 with global_step."""
  rng = np.random.default_rng(0)
  tensors = {name: rng.standard_normal(shape, dtype=np.float32)
             for name, shape in read_fixture_shapes().items()}
  tensors["global_step"] = np.int64(0)
  path = make_tarball(tmp_path_factory.mktemp("published") / NAME, tensors)
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
  assert lines[-1].endswith("its 608 variables have TF-Slim's Inception V4 names and shapes (0 others)")

  _, lines = fetch(tmp_path, url=(tmp_path / "nothing-there").as_uri())  # not fetched again
  assert lines == [f"{path} is already there and holds the 608 variables of TF-Slim's Inception V4: "
                   "nothing to fetch"]


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
  expect_error(rf"{truncated} is not a complete .tar.gz", out, from_file=str(truncated))
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

  kept = tmp_path / "kept"
  kept.mkdir()
  (kept / "inception_v4.ckpt").write_bytes(b"not a checkpoint")
  expect_error(rf"checkpoint {kept}/inception_v4.ckpt is unreadable.*; {kept}/inception_v4.ckpt is not "
               "replaced: move it away", kept, from_file=str(tarball))
  assert (kept / "inception_v4.ckpt").read_bytes() == b"not a checkpoint"


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
