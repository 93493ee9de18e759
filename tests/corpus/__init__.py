"""A corpus of bad inputs for the real CLI (issue 19): every malformed class, plan, artifact,
inventory, site file, probe output and flag an operator could hand fleetgate, each written
into a scratch directory from a valid base by `build.build()`, each with the exit code and
the stderr fragments its refusal must show. `tests/integration/test_bad_inputs.py` runs them.
"""
