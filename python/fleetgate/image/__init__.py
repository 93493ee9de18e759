"""Stage 2: golden images built by Packer from a node class (see issue: Packer golden images)."""
