"""tidemark: stateful Spark Structured Streaming pipelines and the tools around them."""
