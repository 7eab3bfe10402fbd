"""Planning: executor memory from Spark's unified memory model, and the checkpoint mode from measured runs."""
