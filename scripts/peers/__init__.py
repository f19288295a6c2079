"""Peer measurements for the benchmarks (PyTorch and timm in their own venv, see setup_peer_venv.sh)."""
