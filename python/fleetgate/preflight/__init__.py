"""Preflight checks for artifacts before they reach a pool: `fleetgate preflight deps` finds
vendor GPU binaries (CUDA, ROCm, oneAPI) hidden in wheels, virtualenvs, rootfs trees and image
tars, and says which backend each artifact needs and why."""

from fleetgate.preflight.model import SCHEMA, Artifact, Evidence, ScanResult
from fleetgate.preflight.scan import scan_target
from fleetgate.preflight.vendor_table import VendorTable, load_table

__all__ = ["SCHEMA", "Artifact", "Evidence", "ScanResult", "VendorTable", "load_table",
           "scan_target"]
