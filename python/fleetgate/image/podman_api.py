"""podman's Docker-compatible API on a private socket, for the duration of one build.

Packer 1.6.6's docker builder drives the `docker` client; DOCKER_HOST points that client at
`podman system service` listening on a socket in the build's own scratch directory. The
service is stopped, and the socket removed, however the build ends.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleetgate.errors import ToolError
from fleetgate.system.podman import Podman


def _answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.")
        except OSError:
            return False


@contextmanager
def podman_api(podman: Podman, sock: Path, log: Path, *, timeout: float = 60) -> Iterator[str]:
    """Yield a DOCKER_HOST value for a podman API service that is up and answering."""
    sock.unlink(missing_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [podman.binary, "system", "service", "--time=0", f"unix://{sock}"],
            env=podman.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not _answers(sock):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise ToolError(f"podman system service exited ({proc.returncode}): {tail[0]}",
                               source="podman")
            if time.monotonic() > deadline:
                raise ToolError(f"podman API socket not answering after {timeout:.0f}s",
                               source=str(sock))
            time.sleep(0.2)
        yield f"unix://{sock}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        sock.unlink(missing_ok=True)
