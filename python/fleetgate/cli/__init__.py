"""The `fleetgate` command line."""
