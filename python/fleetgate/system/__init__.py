"""Generic local tools that the lab and image builds both stand on: processes, podman,
mmdebstrap root filesystems and the base recipes. Nothing here knows about labs or images;
failures are ToolError (exit 4)."""
