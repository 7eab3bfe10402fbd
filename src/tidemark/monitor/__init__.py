"""Run monitoring: progress records, the durable progress log, watchdog, metrics, analysis and report."""
