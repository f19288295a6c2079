"""Bad input to the scripts beside the trainers (launch_workers, make_real_sets, benchmark): one
`error:` line naming the flag or path, exit code 2, nothing written; in this interpreter where no
subprocess is what is being tested."""
import os

import pytest

from helpers import run_python
from scripts import benchmark
from scripts import launch_workers


def test_launch_workers_refuses_a_program_that_does_not_exist(capsys):
  assert launch_workers.main(["--num_workers", "2", "--", "nosuchcommand", "--flag"]) == 2
  captured = capsys.readouterr()
  assert captured.err.strip() == "error: cannot run nosuchcommand: no such program (on PATH or as a path)"
  assert "[launcher]" not in captured.out  # no worker was started


def test_benchmark_json_that_cannot_be_written_is_one_line_before_the_run(tmp_path, read_only_dir, capsys):
  folder, reason = read_only_dir
  for path, said in ((str(tmp_path), f"error: --json={tmp_path} is a folder; name the file to write"),
                     (os.path.join(folder, "r.json"), f"error: cannot write {folder}/.write-test-")):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      benchmark.main(["segmentation", "--preset", "smoke", "--json", path])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith(said), lines
  assert reason in lines[0] and lines[0].endswith("choose another --json"), lines
  assert os.listdir(folder) == [] and os.listdir(tmp_path) == [os.path.basename(folder)]
  benchmark.check_json_path(str(tmp_path / "new" / "r.json"))  # a missing folder is made
  assert os.listdir(tmp_path / "new") == []


def test_make_real_sets_bad_sets_and_a_read_only_folder_are_one_line(tmp_path, read_only_dir):
  folder, reason = read_only_dir
  for args, said in ((["--sets=bogus,npy", f"--output_dir={tmp_path / 'out'}"],
                      "error: --sets: unknown bogus; valid: "),
                     (["--train_identities=1", f"--output_dir={tmp_path / 'out'}"],
                      "error: --train_identities=1: must be in 2..70"),
                     (["--sets=npy", f"--output_dir={folder}"], f"error: cannot write {folder}")):
    result = run_python(["scripts/make_real_sets.py", *args])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(said), (args, lines)
  assert reason in lines[0] and "choose another --output_dir" in lines[0], lines
  assert not (tmp_path / "out").exists() and os.listdir(folder) == []


def test_a_predict_command_without_a_photo_is_one_line_and_exit_code_2(tmp_path):
  result = run_python(["-m", "triplet.predict", f"--workdir={tmp_path}", "--compare"])
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 2 and lines[-1] == (
      "error: no photo given: name one or more photos or folders after the flags"), lines[-5:]
