"""Stage 1 of the pipeline: node classes (the version lock) and the compatibility matrix."""
