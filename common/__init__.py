"""Plumbing shared by every trainer. Never imports a trainer."""
