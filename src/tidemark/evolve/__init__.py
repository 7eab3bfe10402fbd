"""Change a stateful job without throwing its state away: repartition its state, check a change before deploying it."""
