"""The local lab fleet: real SSH hosts as podman containers and qemu VMs on loopback."""
