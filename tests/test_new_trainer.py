"""scripts/new_trainer.py: a trainer copied under a new name imports, names and installs only itself;
bad arguments and destinations are one line that leaves nothing written; and the README's template
route, line by line, in a fresh copy of the repository and a virtual environment."""
import ast
import contextlib
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import types
import uuid

import numpy as np
from PIL import Image
import pytest

from common.app import cli
from common.app import run_export
from common.app import trainers as trainers_lib
from common.contract import config as config_lib
import helpers
from helpers import REPO_ROOT
from scripts import new_trainer
from segmentation import data as segmentation_data
from segmentation import task as segmentation_task
import test_predict

# The names the tests give new trainers, made per session: never a trainer a user added (the
# README's example's included) nor a module importable here, which the command would refuse.
SESSION = uuid.uuid4().hex[:8]
NEW, OTHER, TAKEN = (f"{word}_{SESSION}" for word in ("roads", "dogs", "taken"))


def run(capsys, *args):
  """(exit code, stderr lines) of the command in this interpreter."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    new_trainer.main(list(args))
    sys.exit(0)
  return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


def files_of(root):
  """{path under root: its bytes} of every file: what a refused command must leave as it was."""
  return {os.path.relpath(os.path.join(folder, name), root): open(os.path.join(folder, name), "rb").read()
          for folder, _, names in os.walk(root) for name in names}


def imported_packages(folder):
  """The top-level names every module of `folder` imports."""
  found = set()
  for name in os.listdir(folder):
    if name.endswith(".py"):
      for node in ast.walk(ast.parse(open(os.path.join(folder, name)).read())):
        if isinstance(node, ast.Import):
          found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
          found.add(node.module.split(".")[0])
  return found


def test_a_trainer_copied_under_a_new_name_imports_and_names_only_itself(tmp_path, capsys):
  """Segmentation as NEW, Inception as OTHER (whose NAME, inception_v4, is also its network module's
  name, which stays): every changed line holds the new name, and prose keeps the old one."""
  dest = tmp_path / "repo"
  for name in ("segmentation", "inception_finetune", "configs"):
    shutil.copytree(os.path.join(REPO_ROOT, name), dest / name, ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copy(os.path.join(REPO_ROOT, "pyproject.toml"), dest)
  for new, source, config in ((NEW, "segmentation", "segmentation"), (OTHER, "inception_finetune", "inception_v4")):
    assert run(capsys, new, "--from", source, "--dest", str(dest)) == (0, [])
    assert trainers_lib.task_constants(dest / new / "task.py") == {"NAME": new, "CONFIG_MODULE": f"configs.{new}"}
    assert source not in imported_packages(dest / new) and new in imported_packages(dest / new)
    pairs = [(dest / source / name, dest / new / name) for name in os.listdir(dest / source) if name.endswith(".py")]
    pairs.append((dest / "configs" / f"{config}.py", dest / "configs" / f"{new}.py"))
    changed = []
    for old_path, new_path in pairs:
      old_lines, new_lines = open(old_path).read().splitlines(), open(new_path).read().splitlines()
      assert len(old_lines) == len(new_lines), new_path
      changed += [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert changed and all(new in b for _, b in changed), [b for _, b in changed if new not in b]
    assert f"base_config({new!r})".replace("'", '"') in open(dest / "configs" / f"{new}.py").read()
    train = open(dest / new / "train.py").read()
    assert f'run_training("configs/{new}.py", "runs/{new}", train_and_evaluate)' in train, train[-300:]
    smoke = ast.parse(open(dest / "tests" / f"test_{new}.py").read())  # its run: the new trainer's smoke preset
    command = next(node for node in ast.walk(smoke) if isinstance(node, ast.List))
    assert [ast.literal_eval(element) for element in command.elts[:3]] == [
        "-m", f"{new}.train", f"--config=configs/{new}.py:smoke"]
  assert "Evaluates a segmentation model" in open(dest / NEW / "evaluate.py").read()  # prose
  assert f"from {OTHER} import inception_v4" in open(dest / OTHER / "task.py").read()
  packages = new_trainer.PACKAGES.search(open(dest / "pyproject.toml").read()).group(1)
  assert json.loads(packages)[-2:] == [NEW, OTHER]


def test_export_runs_the_code_of_the_trainer_the_run_names(tmp_path, capsys, monkeypatch):
  """scripts/export.py imports the trainer config.json names (segmentation, roads: never a trainer
  whose config looks the same); one it cannot import, or none named, is one line."""
  monkeypatch.setattr(sys, "argv", ["export"])  # run_config reads --config arguments from it
  config_lib.write_config(helpers.make_config("segmentation", "smoke"), str(tmp_path))
  module, config = run_export.trainer_of(str(tmp_path))
  assert module is segmentation_task and config.trainer == "segmentation"
  saved = json.load(open(tmp_path / "config.json"))
  for trainer, said in (("gone", "error: {} is a run of the trainer 'gone', whose code is not importable here "
                                 "(No module named 'gone'): run the scripts/export.py of its repository, or pip "
                                 "install -e . there"),
                        (None, "error: {} names no trainer (trainer None); give the --workdir of a training run")):
    (tmp_path / "config.json").write_text(json.dumps({**saved, "trainer": trainer}))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      cli.run_guarded(run_export.trainer_of, str(tmp_path))
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        said.format(tmp_path / "config.json")]


def test_evaluate_and_predict_refuse_the_run_of_a_look_alike_trainer(tmp_path, capsys, monkeypatch):
  """A copy's run (its config segmentation's in all but the name) read by segmentation's commands
  (cli.run_config, which evaluate and predict read a run with): one line naming both trainers; a
  run from before config.json named its trainer: the line says how to name it."""
  monkeypatch.setattr(sys, "argv", ["evaluate"])
  config_lib.write_config(helpers.make_config("segmentation", "smoke", trainer="roads"), str(tmp_path))
  saved = json.load(open(tmp_path / "config.json"))
  del saved["trainer"]
  (tmp_path / "older").mkdir()
  (tmp_path / "older" / "config.json").write_text(json.dumps(saved))  # from before runs named theirs
  for workdir, trainer, hint in ((tmp_path, "'roads'", ""), (tmp_path / "older", "None", (
      ', or add "trainer": "segmentation" to it if it is a run of this trainer'))):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      cli.run_guarded(cli.run_config, types.SimpleNamespace(value=helpers.make_config("segmentation", "smoke")),
                      str(workdir))
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        f"error: {workdir / 'config.json'} is another trainer's config (trainer {trainer}, not 'segmentation'); "
        f"give the --workdir of a run of this trainer, or pass --config=<file>{hint}"]


@pytest.mark.slow
def test_a_copys_script_runs_the_copys_new_trainer_from_its_root(tmp_path, capsys):
  """`python scripts/export.py` from the root of a repository a trainer was added to, before its
  `pip install` (was: "not importable here ... run from the root of its repository" while run from
  there: sys.path[0] is scripts/, and the suite's own repository is the one on PYTHONPATH): the
  script runs the copy's packages (scripts/repository_root.py) and exports the new trainer's run."""
  dest = tmp_path / "repo"
  for name in ("common", "configs", "scripts", "segmentation"):
    shutil.copytree(os.path.join(REPO_ROOT, name), dest / name, ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copy(os.path.join(REPO_ROOT, "pyproject.toml"), dest)
  assert run(capsys, NEW, "--from", "segmentation", "--dest", str(dest)) == (0, [])
  config = helpers.make_config("segmentation", "smoke", trainer=NEW)
  model = segmentation_task.build_model(config, segmentation_data.read_settings(config.data))
  test_predict.write_run(NEW, dest / "runs" / NEW, model, config)
  result = helpers.run_python(["scripts/export.py", f"--workdir=runs/{NEW}", "--format=saved_model",
                               "--output=exported"], cwd=dest, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (dest / "exported" / "assets" / "trainer.txt").read_text() == f"{NEW}\n"


def write_repository(root):
  """A repository of one small trainer, mini (what the command reads of one)."""
  for path, text in {"pyproject.toml": '[tool.setuptools]\npackages = ["common", "mini"]\n',
                     "configs/mini.py": 'config = base_config("mini")\n',
                     "mini/__init__.py": "",
                     "mini/task.py": 'NAME = "mini"\nCONFIG_MODULE = "configs.mini"\n',
                     "mini/train.py": 'from mini import task\n# python -m mini.train --config=configs/mini.py\n',
                     "tests/helpers.py": ""}.items():
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "w") as f:
      f.write(text)


def test_a_bad_name_source_or_destination_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
  dest = str(tmp_path / "repo")
  write_repository(dest)
  assert run(capsys, TAKEN, "--from", "mini", "--dest", dest)[0] == 0
  before = files_of(dest)
  for args, said in (
      (["Roads", "--from", "mini"], "error: 'Roads' is not a package name: lower-case letters, digits and _"),
      (["class", "--from", "mini"], "error: 'class' is not a package name"),
      ([NEW, "--from", "nothing"], f"error: --from=nothing: not a trainer of {dest} (its trainers: mini, {TAKEN})"),
      ([TAKEN, "--from", "mini"], f"error: {os.path.join(dest, TAKEN)} exists already: choose another name"),
      (["json", "--from", "mini"], "error: 'json' is already an importable module ("),
      ([NEW], "error: the following arguments are required: --from"),
      ([NEW, "--from", "mini", "--dest", str(tmp_path)], f"error: --dest={tmp_path} is not a repository of trainers"),
  ):
    code, lines = run(capsys, *args, *(() if "--dest" in args else ("--dest", dest)))
    assert code == 2 and len(lines) == 1 and lines[0].startswith(said), (args, lines)
    assert files_of(dest) == before, args

  written, write = [], new_trainer._write  # pylint: disable=protected-access

  def interrupted(path, text):  # Ctrl-C after the package's first file
    if written:
      raise KeyboardInterrupt()
    written.append(path)
    write(path, text)

  monkeypatch.setattr(new_trainer, "_write", interrupted)
  assert run(capsys, NEW, "--from", "mini", "--dest", dest) == (
      128 + signal.SIGINT, ["error: interrupted by SIGINT; nothing was written"])
  assert written and files_of(dest) == before


@contextlib.contextmanager
def repository_on_tmpfs(path, state):
  """write_repository on a small tmpfs at path, then made read-only or filled but for one page
  (root mounts it; skips where mounting is not allowed)."""
  os.makedirs(path)
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "none", str(path)], capture_output=True).returncode:
    pytest.skip("no tmpfs can be mounted here (root can; CI runs as root)")
  try:
    write_repository(path)
    if state == "read-only":
      subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
    else:
      free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
      with open(os.path.join(path, "filler"), "wb") as f:
        f.write(b"x" * (free - 4096))
    yield str(path)
  finally:
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize("state, reason", [("read-only", "Read-only file system"), ("full disk", "No space left on device")])
def test_a_read_only_or_full_destination_is_one_line_and_leaves_nothing(tmp_path, capsys, state, reason):
  with repository_on_tmpfs(tmp_path / "repo", state) as dest:
    before = files_of(dest)
    code, lines = run(capsys, NEW, "--from", "mini", "--dest", dest)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: cannot write {dest}/{NEW}"), lines
    assert lines[0].endswith(f"({reason}); make --dest writable or free space, then run the command again: "
                             "nothing was written"), lines
    assert files_of(dest) == before


def copy_of_the_repository(path):
  """The repository's files as a clone has them: what .gitignore leaves out is left out."""
  ignored = [line.strip().strip("/") for line in open(os.path.join(REPO_ROOT, ".gitignore"))
             if line.strip() and not line.startswith("#")]
  shutil.copytree(REPO_ROOT, path, ignore=shutil.ignore_patterns(".git", *ignored))


def fresh_venv(path):
  """A virtual environment that reuses this interpreter's packages (TensorFlow, pip, setuptools)
  through a .pth file, without a download; its own site-packages come first."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
  python = os.path.join(path, "bin", "python")
  own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, check=True).stdout.strip()
  with open(os.path.join(own, "reused.pth"), "w") as f:
    f.write("".join(f"{folder}\n" for folder in site.getsitepackages()))
  return python


@pytest.mark.slow
def test_the_readme_template_route_in_a_fresh_copy_and_virtual_environment(tmp_path):
  """Every line of the README's template route, in order, in a copy of the repository where the
  README's example was run already (as a user who followed it has it): the copy, the route under
  the session's name NEW (the README's name swapped for it), `pip install -r requirements.txt` in a
  fresh venv (offline: the requirements are installed already, and the build uses the installed
  setuptools) installing both trainers, training, export and predict, all by the code of NEW (its
  name in each file it writes). Its tests/test_NEW.py, which trains 2 steps more, is left to the
  copy's own suite (about 20 s here)."""
  project = tmp_path / "project"
  copy_of_the_repository(project)
  Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 56, 3), np.uint8)).save(project / "photo.jpg")
  python = fresh_venv(tmp_path / "venv")
  env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
  env.update(PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", TF_CPP_MIN_LOG_LEVEL="2")

  def run_line(args):
    result = subprocess.run([python, *args], cwd=project, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, (args, result.stderr[-3000:])

  example = helpers.readme_command("python scripts/new_trainer.py")[1]
  if not (project / example).exists():
    run_line(helpers.readme_command("python scripts/new_trainer.py"))
  swap = [(example, NEW)]
  run_line(helpers.readme_command("python scripts/new_trainer.py", paths=swap))
  run_line(["-m", "pip", "install", "-r", "requirements.txt"])  # the README's pip, the venv's interpreter
  where = subprocess.run([python, "-c", f"import {example}, {NEW}, common; print({example}.__file__, "
                          f"{NEW}.__file__, common.__file__)"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout.split()
  assert where == [str(project / name / "__init__.py") for name in (example, NEW, "common")]
  for start, workdir in ((f"python -m {example}.train", f"runs/{NEW}"),
                         (f"python -m {example}.evaluate", f"runs/{NEW}"),
                         (f"python scripts/export.py --workdir=runs/{example}", f"runs/{NEW}"),
                         (f"python -m {example}.predict", None)):
    run_line(helpers.readme_command(start, paths=swap, workdir=workdir))  # as written (--workdir put back last)
  assert json.load(open(project / "runs" / NEW / "config.json"))["trainer"] == NEW
  for saved_model in ("saved_model", "exported"):
    assert (project / "runs" / NEW / saved_model / "assets" / "trainer.txt").read_text() == f"{NEW}\n"
  assert (project / "runs" / f"{NEW}_masks" / "photo_mask.png").is_file()


def test_a_copy_is_layout_checked_hostile_checked_and_benchmarked_by_its_name(tmp_path):
  """The repository's checks find their trainers (common/app/trainers.py), never a list by hand: in a
  copy of the repository with NEW added, the tests of the copy, unedited, check NEW's folder, ask the
  hostile table for NEW's commands and test_config for bad values of its keys (none yet: skipped,
  naming what to write, so the suite stays green), and the benchmark takes NEW by its name."""
  dest = tmp_path / "repo"
  copy_of_the_repository(dest)
  new_trainer.new_trainer(NEW, "segmentation", str(dest))
  env = {**os.environ, "PYTHONPATH": str(dest)}
  layout, table, keys = (f"tests/test_layout.py::test_trainer_folders_share_their_file_names[{NEW}]",
                         "tests/test_hostile.py::test_every_command_of_the_repository_is_in_the_table",
                         f"tests/test_config.py::test_every_key_has_a_bad_value_or_is_checked_elsewhere[{NEW}]")
  result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rA",
                           layout, table, keys], cwd=dest, env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0 and f"PASSED {layout}" in result.stdout, result.stdout[-3000:]
  asked = re.search(rf"SKIPPED \[1\] {table.split('::')[0]}:\d+: new trainers' commands without rows in "
                    r"tests/hostile_table.py yet: (.*)", result.stdout)  # NEW's, and the user's copies'
  assert asked and {f"{NEW}.evaluate", f"{NEW}.predict", f"{NEW}.train"} <= set(asked[1].split(", ")), \
      result.stdout[-3000:]
  assert f"{NEW}'s own keys have no bad values in OWN of tests/test_config.py yet" in result.stdout
  result = subprocess.run([sys.executable, "scripts/benchmark.py", NEW, "--preset", "smoke", "--estimate_only",
                           "--cache_dir", str(tmp_path / "cache")], cwd=dest, env=env, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0 and f"== {NEW} (preset smoke" in result.stdout, result.stderr[-3000:]
