"""`python -m tidemark.spark.jvm`: build the state helper jar now (make install runs it)."""

from tidemark.spark.jvm import main

main()
