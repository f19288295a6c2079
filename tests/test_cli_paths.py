"""Every path a command line takes (--workdir, --saved_model, --report_dir, predict's --output_dir)
gets the workdir's one-line checks: a missing SavedModel, a file where a folder is wanted, an
unwritable folder is exit 2 and one `error:` line naming the path and the flag, no traceback."""
import ast
import functools
import glob
import os
import sys
import types

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import cli
from common.app import commands
from common.app import run_export
from common.app.trainers import find_trainers
from helpers import make_config
from helpers import REPO_ROOT
from helpers import run_python
from segmentation import predict
import test_predict
from triplet import task as triplet_task

CONFIG = make_config("segmentation", "default")  # what predict reads of it: data.eval_max_pixels


@pytest.fixture
def paths(tmp_path):
  """A file, a folder holding a (stand-in) SavedModel and a workdir with a checkpoint."""
  made = {"file": tmp_path / "a_file", "saved_model": tmp_path / "sm", "workdir": tmp_path / "run",
          "empty": tmp_path / "empty"}
  made["file"].write_text("not a folder")
  for name in ("saved_model", "empty"):
    made[name].mkdir()
  (made["saved_model"] / "saved_model.pb").write_bytes(b"")  # the checks look for it; nothing loads it
  tf.train.CheckpointManager(tf.train.Checkpoint(step=tf.Variable(1)), str(made["workdir"] / "checkpoints"),
                             max_to_keep=1).save()
  return {name: str(path) for name, path in made.items()}


# (what, evaluation paths (workdir, saved_model, report_dir) as names of the fixture's paths or
# paths under them, the text the line must hold).
EVALUATION_CASES = [
    ("missing SavedModel", ("workdir", "empty/nothing", None), "SavedModel {empty}/nothing does not exist"),
    ("SavedModel is a file", ("workdir", "file", None), "--saved_model {file} is a file, not a SavedModel"),
    ("SavedModel folder without saved_model.pb", ("workdir", "empty", None),
     "--saved_model {empty} is a folder without saved_model.pb"),
    ("workdir is a file", ("file", None, None), "--workdir {file} is a file"),
    ("workdir without a checkpoint", ("empty", None, None), "no checkpoint in {empty}/checkpoints"),
    ("report_dir is a file", ("workdir", None, "file"),
     "cannot write {file} (File exists); a file stands where a folder is needed: choose another --report_dir"),
    ("report_dir under a file", ("workdir", None, "file/report"),
     "cannot write {file}/report (Not a directory); a file stands where a folder is needed: "
     "choose another --report_dir"),
    ("workdir is a file, with a SavedModel", ("file", "saved_model", None),
     "cannot write {file}/eval (Not a directory); a file stands where a folder is needed: "
     "choose another --workdir (or give --report_dir)"),
]


def resolve(paths, name):
  if name is None:
    return None
  first, _, rest = name.partition("/")
  return os.path.join(paths[first], rest) if rest else paths[first]


def one_error_line(capsys, function, *args):
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(function, *args)
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
  return lines[0][len("error: "):]


def test_bad_evaluation_paths_are_one_line_each(paths, capsys):
  for what, names, expected in EVALUATION_CASES:
    line = one_error_line(capsys, cli.check_evaluation_paths, *(resolve(paths, n) for n in names))
    assert line.startswith(expected.format(**paths)), (what, line)


def test_good_evaluation_paths_pass_and_the_report_folder_is_made(paths):
  cli.check_evaluation_paths(paths["workdir"], None, None)
  assert os.path.isdir(os.path.join(paths["workdir"], "eval"))
  report = os.path.join(paths["empty"], "reports", "one")
  cli.check_evaluation_paths(paths["file"], paths["saved_model"], report)  # the workdir is not read
  assert os.path.isdir(report)


def test_bad_predict_paths_are_one_line_each_before_the_saved_model_loads(paths, capsys):
  image = os.path.join(paths["empty"], "photo.png")
  cases = [((paths["empty"] + "/nothing", paths["empty"]), f"SavedModel {paths['empty']}/nothing does not exist"),
           ((paths["file"], paths["empty"]), f"--saved_model {paths['file']} is a file"),
           ((paths["saved_model"], paths["file"]), f"cannot write {paths['file']} (File exists); a file stands "
                                                   "where a folder is needed: choose another --output_dir")]
  for (saved_model, output_dir), expected in cases:
    line = one_error_line(capsys, functools.partial(predict.predict_files, [image], output_dir, CONFIG,
                                                     saved_model=saved_model))
    assert line.startswith(expected), line


def test_read_only_report_and_output_folders_are_one_line_each(paths, read_only_dir, capsys):
  read_only, reason = read_only_dir
  line = one_error_line(capsys, cli.check_evaluation_paths, paths["workdir"], None, f"{read_only}/report")
  assert line == (f"cannot write {read_only}/report ({reason}); it is not writable: make it writable or "
                  "choose another --report_dir"), line
  line = one_error_line(capsys, functools.partial(predict.predict_files, ["photo.png"], f"{read_only}/masks", CONFIG,
                                                   saved_model=paths["saved_model"]))
  assert line.startswith(f"cannot write {read_only}/masks ({reason}); it is not writable"), line


def write_photo(paths):
  """A 100x60 photo (6,000 pixels)."""
  photo = os.path.join(paths["empty"], "photo.png")
  Image.fromarray(np.zeros((100, 60, 3), np.uint8)).save(photo)
  return photo


def test_a_photo_over_max_pixels_is_one_line_before_the_saved_model_loads(paths, capsys):
  photo = write_photo(paths)
  # The stand-in SavedModel would not load: the line comes from the photo's header alone.
  line = one_error_line(capsys, functools.partial(predict.predict_files, [photo], paths["empty"], CONFIG,
                                                   saved_model=paths["saved_model"], max_pixels=5000))
  assert line == (f"{photo}: 100x60 is 6,000 pixels, more than --max_pixels=5,000, the bound on the memory "
                  "of one whole image; resize it or raise --max_pixels, or set eval.window to evaluate it in "
                  "tiles"), line


def test_the_command_lines_say_it_in_one_line(paths):
  photo = write_photo(paths)
  commands = [
      (["-m", "segmentation.evaluate", "--config=configs/segmentation.py:smoke", f"--workdir={paths['workdir']}",
        f"--report_dir={paths['file']}"], f"error: cannot write {paths['file']} (File exists)"),
      (["-m", "segmentation.predict", f"--saved_model={paths['saved_model']}", f"--output_dir={paths['file']}",
        "photo.png"], f"error: cannot write {paths['file']} (File exists)"),
      (["-m", "segmentation.predict", f"--saved_model={paths['saved_model']}", f"--output_dir={paths['empty']}",
        "--max_pixels=5000", photo], f"error: {photo}: 100x60 is 6,000 pixels, more than --max_pixels=5,000"),
  ]
  for args, expected in commands:
    result = run_python(args, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert lines[-1].startswith(expected), lines[-5:]
    assert "Traceback" not in result.stderr
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]


def test_an_export_output_that_would_replace_what_the_export_did_not_make_is_refused(tmp_path, capsys):
  """scripts/export.py's --output, checked before anything is read: never an existing folder (above
  all the run's own), nothing inside a folder of the run, no existing file but an earlier export."""
  run = tmp_path / "run"
  for folder in ("checkpoints", "saved_model", "eval"):
    (run / folder).mkdir(parents=True)
  for name in ("config.json", "model.onnx", "model.tflite"):
    (run / name).write_text("{}")
  for name, fmt in (("model.onnx", "onnx"), ("model.tflite", "litert")):  # earlier exports, their JSON says
    (run / f"{name}.json").write_text(f'{{"trainer": "segmentation", "format": "{fmt}"}}')
  (run / "taken.tflite.json").mkdir()  # where the JSON beside an export goes
  (tmp_path / "elsewhere").mkdir()
  refused = [
      ("onnx", "run", "--output={0} is the run's --workdir; an export never replaces a folder"),
      ("onnx", "run/", "--output={0} is the run's --workdir"),
      ("litert", "run/checkpoints", "--output={0} is an existing folder; an export never replaces a folder"),
      ("saved_model", "run/saved_model/", "--output={0} is an existing folder"),
      ("saved_model", "elsewhere", "--output={0} is an existing folder"),
      ("onnx", "run/checkpoints/model.onnx", "--output={0} is inside checkpoints/, a folder of the run"),
      ("saved_model", "run/eval/exported", "--output={0} is inside eval/, a folder of the run"),
      ("onnx", "run/config.json", "--output={0} exists and is not an earlier onnx export (a name ending .onnx)"),
      ("onnx", "run/model.tflite", "--output={0} exists and is not an earlier onnx export"),
      ("saved_model", "run/model.onnx", "--output={0} exists and is not an earlier saved_model export"),
      ("litert", "run/taken.tflite", "--output={0}: {0}.json, where the export's JSON goes, is a folder"),
  ]
  for fmt, output, said in refused:
    output = str(tmp_path / output) + ("/" if output.endswith("/") else "")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      cli.run_guarded(run_export.check_output, output, fmt, str(run))
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, (fmt, output, lines)
    assert lines[0].startswith("error: " + said.format(output)), (fmt, output, lines)
  # An earlier export of the format is replaced; a new name beside the run's files is taken as is.
  for fmt, output in (("onnx", "run/model.onnx"), ("litert", "run/model.tflite"), ("onnx", "run/new.onnx"),
                      ("saved_model", "run/exported"), ("litert", "elsewhere/m.tflite")):
    assert run_export.check_output(str(tmp_path / output), fmt, str(run)) == str(tmp_path / output)
  assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "eval", "model.onnx", "model.onnx.json",
                                     "model.tflite", "model.tflite.json", "saved_model", "taken.tflite.json"]


def test_an_export_image_size_out_of_range_is_one_line(capsys):
  """--image_size=-1 was a TensorFlow traceback, 0 silently the default, 100000 out of memory."""
  for side in (-1, 0, run_export.MAX_IMAGE_SIDE + 1, 100000):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      cli.run_guarded(run_export.check_image_size, (side, side))
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and lines == [
        f"error: --image_size={side} is not a side of 1 to {run_export.MAX_IMAGE_SIDE} pixels; leave it out "
        "for any size"], (side, lines)
  for good in (None, (1, 1), (run_export.MAX_IMAGE_SIDE,) * 2):
    run_export.check_image_size(good)


# Each trainer's own config file, relative to the repository root (its commands' default --config).
OWN_CONFIGS = ("configs/segmentation.py", "configs/triplet.py", "configs/inception_v4.py")


def test_commands_that_read_a_run_work_from_another_folder(tmp_path, monkeypatch, capsys, triplet_smoke_run):
  """Run from a folder other than the repository root, with relative paths (was: `error: config file
  configs/segmentation.py does not exist` before any run was read): each trainer's own config file is
  found beside its package (cli.own_config, which define_flags gives --config as its default); a
  relative --config the user gives stays relative to the current folder, its line naming what to
  give; evaluate (triplet's run, the report in a relative folder) and export's reader of the run
  take a relative --workdir."""
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  monkeypatch.setattr(sys, "argv", ["evaluate"])  # cli.run_config reads the --config arguments there
  assert not [default for default in OWN_CONFIGS if cli.own_config(default) != os.path.join(REPO_ROOT, default)
              or not os.path.isfile(cli.own_config(default))]
  for default in OWN_CONFIGS:
    own = cli.own_config(default)
    cli._check_config_args(own, ["evaluate"])  # pylint: disable=protected-access
    line = one_error_line(capsys, cli._check_config_args,  # pylint: disable=protected-access
                          own, ["evaluate", f"--config={default}:smoke"])
    assert line == (f"config file {default} does not exist (a relative --config is read from the current "
                    f"folder, {elsewhere}); give the path of one, e.g. --config={own}"), line
  workdir = os.path.relpath(triplet_smoke_run.workdir)
  assert workdir.startswith("..")
  own = cli.own_config("configs/triplet.py")
  flag = types.SimpleNamespace(value=cli._load_config(own, ["evaluate"]))  # pylint: disable=protected-access
  evaluation, _, report_dir = commands.evaluate_run(flag, workdir, triplet_task.make_task, report_dir="report")
  assert evaluation.metrics["recall_at_1"] == pytest.approx(triplet_smoke_run.results["eval"]["recall_at_1"])
  assert report_dir == "report" and os.listdir(elsewhere / "report")
  module, config = run_export.trainer_of(workdir)
  assert module is triplet_task and config.trainer == "triplet"


@pytest.mark.slow
def test_predict_runs_from_another_folder_with_relative_and_absolute_paths(tmp_path):
  """The command line itself, from a folder other than the repository root (issue 50's): a relative
  --workdir and photo, an absolute --output_dir."""
  _, run = test_predict.segmentation_run(tmp_path)
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(elsewhere / "photo.png")
  result = run_python(["-m", "segmentation.predict", f"--workdir={os.path.relpath(run, elsewhere)}",
                       f"--output_dir={tmp_path / 'out'}", "photo.png"], cwd=elsewhere, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(os.listdir(tmp_path / "out")) == ["photo_classes.png", "photo_mask.png", "photo_overlay.png"]


def test_every_script_run_as_a_file_imports_this_repositorys_packages_first():
  """`python scripts/x.py` puts scripts/ on sys.path, not the root (was: a trainer added in a copy was
  not importable from the copy's root, or another installed repository's ran): every script that
  runs as a file and imports the repository's packages imports scripts/repository_root.py first."""
  project = ("common", "configs", "scripts", *(trainer.package for trainer in find_trainers(REPO_ROOT)))
  checked = []
  for path in sorted(glob.glob(os.path.join(REPO_ROOT, "scripts", "*.py"))):
    body = ast.parse(open(path).read()).body
    runs = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in body)
    imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not runs or not any((node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                            ).split(".")[0] in project for node in imports):
      continue
    first = next(node for node in body if not isinstance(node, ast.Expr))  # after the docstring
    assert ast.unparse(first) == "if not __package__:\n    import repository_root", path
    checked.append(os.path.basename(path))
  assert "export.py" in checked and "make_real_sets.py" in checked, checked
