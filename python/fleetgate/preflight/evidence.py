"""Turn what an ELF file says about itself into vendor evidence."""

from __future__ import annotations

from fleetgate.preflight.elf_scan import ElfFacts
from fleetgate.preflight.model import Evidence
from fleetgate.preflight.vendor_table import VendorTable, soname_stem


def elf_evidence(file: str, facts: ElfFacts, table: VendorTable) -> set[Evidence]:
    found: set[Evidence] = set()
    linked: set[str] = set()
    for needed in facts.needed:
        stem = soname_stem(needed)
        vendor = table.library_vendor(stem)
        if vendor is not None:
            found.add(Evidence(vendor, "DT_NEEDED", file, needed))
            linked.add(stem)
    # The file name counts as well as DT_SONAME: wheels often ship a vendor library under its
    # versioned file name with no DT_SONAME, or renamed by auditwheel (libcudart.faf08d9a.so.13).
    own = {soname_stem(file)} | ({soname_stem(facts.soname)} if facts.soname else set())
    for stem in sorted(own):
        vendor = table.library_vendor(stem)
        if vendor is not None:
            found.add(Evidence(vendor, "provides", file, facts.soname or file.rsplit("/", 1)[-1]))
            linked.add(stem)
    for string in facts.dlopen:
        stem = soname_stem(string)
        vendor = table.library_vendor(stem)
        # A library the file already links or is adds nothing as a weaker claim.
        if vendor is not None and stem not in linked:
            found.add(Evidence(vendor, "dlopen-string", file, string))
    return found
