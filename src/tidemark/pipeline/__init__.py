"""The stateful event-time pipeline: source, event time, watermark, stateful step, sink."""
