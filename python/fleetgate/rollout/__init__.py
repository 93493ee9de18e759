"""Stage 5: the rollout controller: waves, gates, budgets, journal."""
