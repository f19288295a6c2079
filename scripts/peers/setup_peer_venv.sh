#!/usr/bin/env bash
# Creates (or finds) the virtual environment of the PyTorch peers that
# scripts/benchmark.py compares against, and prints its path.
#
#   scripts/peers/setup_peer_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to $PEER_VENV, else peer-venv beside the repository. It is
# never part of requirements.txt: PyTorch is a peer to measure, not a
# dependency. torch and torchvision are installed first as a matching pair;
# installing timm beside an unpinned torch can pull a torchvision built for
# another torch ("operator torchvision::nms does not exist"). About 6 GB.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-${PEER_VENV:-$(dirname "$repo")/peer-venv}}
pins=(torch==2.14.1 torchvision==0.29.1)

if "$venv/bin/python" -c "import torch, torchvision, timm, pytorch_metric_learning" 2>/dev/null; then
  echo "$venv"
  exit 0
fi
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install -q "${pins[@]}" >&2
"$venv/bin/pip" install -q timm pytorch-metric-learning "${pins[@]}" >&2
"$venv/bin/python" -c "import torch, torchvision, timm, pytorch_metric_learning" >&2
echo "$venv"
