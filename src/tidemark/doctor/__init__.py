"""Checkpoint doctor and safe retention: inspect what a Spark checkpoint holds, prune what it no longer needs."""
