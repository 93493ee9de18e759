"""Stage 3: changes applied to hosts, always through ansible-runner."""
