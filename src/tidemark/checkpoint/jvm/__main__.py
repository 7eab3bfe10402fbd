"""`python -m tidemark.checkpoint.jvm`: build the state helper jar now (make install runs it)."""

from tidemark.checkpoint.jvm import main

main()
