"""userland on a real lab host: the class's OpenBLAS behind libblas.so.3, and numpy loading it."""

from __future__ import annotations

from testinfra.host import Host


def test_libblas_alternative_resolves_to_openblas(host: Host) -> None:
    links = host.check_output("ls /etc/alternatives/ | grep '^libblas.so.3-'").split()
    assert links, "no libblas.so.3 alternative"
    target = host.check_output(f"readlink -f /etc/alternatives/{links[0]}")
    assert "openblas" in target and host.file(target).exists
    assert host.package("libopenblas0-serial").is_installed


def test_numpy_loads_openblas(host: Host) -> None:
    # What the GEMM probe will really run on: the BLAS mapped into a numpy process.
    maps = host.check_output(
        "python3 -c 'import numpy, re; numpy.ones((64, 64)) @ numpy.ones((64, 64));"
        " print(open(\"/proc/self/maps\").read())'")
    assert "openblas" in maps
