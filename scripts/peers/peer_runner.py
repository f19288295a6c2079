"""Finds the peer venv and runs torch_peers.py in it; a peer that cannot run is skipped, never faked."""
import json
import os
import pathlib
import subprocess

PEERS_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = PEERS_DIR.parents[1]
SETUP = "scripts/peers/setup_peer_venv.sh"


def find_peer_venv():
  """$PEER_VENV, else peer-venv beside the repository (where setup_peer_venv.sh puts it)."""
  return pathlib.Path(os.environ.get("PEER_VENV") or REPO_ROOT.parent / "peer-venv")


def run_peer(args, timeout_s=600, venv=None):
  """Runs `torch_peers.py ARGS` in the peer venv; its JSON dict, or {"skipped": why}."""
  venv = pathlib.Path(venv) if venv else find_peer_venv()
  python = venv / "bin" / "python"
  if not python.exists():
    return {"skipped": f"no peer venv at {venv}; create it with {SETUP}"}
  command = [str(python), str(PEERS_DIR / "torch_peers.py"), *map(str, args)]
  try:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
  except subprocess.TimeoutExpired:
    return {"skipped": f"peer ran over {timeout_s} s: {' '.join(map(str, args))}"}
  if result.returncode != 0:
    last = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return {"skipped": f"peer failed (exit {result.returncode}): {last}"}
  return json.loads(result.stdout.strip().splitlines()[-1])
