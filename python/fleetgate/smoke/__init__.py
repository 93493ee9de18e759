"""Stage 4: smoke probes and the testinfra suite that gates promotions."""
