"""Triplet-loss embedding trainer with online mining (FaceNet-style)."""
