"""fleetgate: golden images, pinned GPU stacks and gated canary rollouts for GPU fleets."""

__version__ = "0.1.0"
