"""Recovery: restart after a lost or corrupt checkpoint with nothing lost and nothing duplicated."""
