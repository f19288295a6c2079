"""Runs a measurement script in a fresh process; a run that cannot happen is skipped, never faked.

Each script prints one JSON object as its last line of output. The PyTorch
peers (torch_peers.py) run in the peer venv; our own triplet step
(tf_triplet_step.py) runs with this interpreter, in a process of its own like
the peer, so that both sides' memory is measured the same way.
"""
import json
import os
import pathlib
import subprocess
import sys

PEERS_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = PEERS_DIR.parents[1]
SETUP = "scripts/peers/setup_peer_venv.sh"


def find_peer_venv():
  """$PEER_VENV, else peer-venv beside the repository (where setup_peer_venv.sh puts it)."""
  return pathlib.Path(os.environ.get("PEER_VENV") or REPO_ROOT.parent / "peer-venv")


def run_script(python, script, args, timeout_s):
  """Runs `python script ARGS`; its JSON dict, or {"skipped": why}."""
  command = [str(python), str(script), *map(str, args)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  try:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                            cwd=REPO_ROOT)
  except subprocess.TimeoutExpired:
    return {"skipped": f"{pathlib.Path(script).name} ran over {timeout_s} s: {' '.join(map(str, args))}"}
  if result.returncode != 0:
    last = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return {"skipped": f"{pathlib.Path(script).name} failed (exit {result.returncode}): {last}"}
  lines = result.stdout.strip().splitlines()
  try:
    return json.loads(lines[-1])
  except (IndexError, json.JSONDecodeError):
    return {"skipped": f"{pathlib.Path(script).name} printed no JSON result"}


def missing_peer_venv(venv=None):
  """Why the peers cannot run ({"skipped": why}), or None when the peer venv is there."""
  venv = pathlib.Path(venv) if venv else find_peer_venv()
  if not (venv / "bin" / "python").exists():
    return {"skipped": f"no peer venv at {venv}; create it with {SETUP}"}
  return None


def run_peer(args, timeout_s=900, venv=None):
  """Runs `torch_peers.py ARGS` in the peer venv; its JSON dict, or {"skipped": why}."""
  venv = pathlib.Path(venv) if venv else find_peer_venv()
  return missing_peer_venv(venv) or run_script(venv / "bin" / "python", PEERS_DIR / "torch_peers.py",
                                               args, timeout_s)


def run_tf_triplet(args, timeout_s=900):
  """Runs our triplet loss step (tf_triplet_step.py ARGS) with this interpreter."""
  return run_script(sys.executable, PEERS_DIR / "tf_triplet_step.py", args, timeout_s)
