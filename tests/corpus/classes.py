"""Bad node classes: each a valid class from inventory/classes with one thing wrong, or a file
that is not a class at all. Run through `spec validate FILE`, `spec show FILE`, `spec vars
FILE --for packer`, or by name from FLEETGATE_CLASSES_DIR (`spec vars NAME`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from tests.corpus.base import Base
from tests.corpus.entry import (
    DIR_REASON,
    FIFO_REASON,
    Entry,
    Mutation,
    deep_yaml,
    directory,
    drop,
    edits,
    fifo,
    huge_then,
    mutated,
    put,
    write,
    write_yaml,
)

H100, H200, MI300X, CPU = "nvidia-h100-535", "nvidia-h200-580", "amd-mi300x-rocm", "lab-cpu"

# (id, base class, mutation, field that must be named, the mistake)
MUTATIONS: list[tuple[str, str, Mutation, str, str]] = [
    ("cuda-float", H100, put("userland.cuda", 12.2), "userland.cuda",
     "a version written as a YAML float"),
    ("missing-kernel-abi", H100, drop("kernel.abi"), "kernel.abi", "a required field left out"),
    ("unknown-top-key", CPU, put("gpus", 8), "gpus", "an unknown top-level key"),
    ("unknown-nested-key", H100, put("driver.branchh", "535"), "branchh",
     "a typo'd nested key"),
    ("count-negative", H100, put("accelerator.count", -1), "accelerator.count",
     "a negative GPU count"),
    ("h100-driver-470", H100, edits(
        put("driver.branch", "470"), put("driver.version", "470.256.02-1"),
        put("dkms[0].version", "470.256.02"), put("userland.cuda", "11.4")), "driver",
     "an H100 (Hopper) pinned to driver 470, which predates it"),
    ("mi300x-gfx803", MI300X, put("accelerator.compute_capability", "gfx803"),
     "compute_capability", "an MI300X declared as gfx803 (Polaris)"),
    ("mi300x-nvidia-pci-id", MI300X, put("accelerator.pci_ids", ["10de:2330"]), "pci_ids",
     "an AMD accelerator with an NVIDIA PCI vendor id"),
    ("h200-cc-8-0", H200, put("accelerator.compute_capability", "8.0"), "compute_capability",
     "an H200 (Hopper, 9.0) declared compute capability 8.0"),
    ("dkms-version-not-driver", H100, put("dkms[0].version", "535.183.01"), "dkms",
     "the nvidia DKMS module at another version than the driver"),
    ("kernel-package-not-abi", H100, put("kernel.package_version", "6.12.38-1"), "kernel",
     "a kernel package version of another series than its ABI"),
    ("os-ubuntu-bookworm", H100, put("os.family", "ubuntu"), "os",
     "an Ubuntu class with a Debian codename"),
    ("tflops-min-inf", H100, put("smoke.gemm", {"dtype": "bf16", "size": 8192,
                                                "tflops_min": float("inf")}), "tflops_min",
     "an infinite TFLOPS floor no host can meet"),
    ("name-mismatch", H100, put("name", "nvidia-h100-999"), "name",
     "a class whose name is not its file's"),
    ("kernel-abi-subshell", CPU, put("kernel.abi", "6.1.0-55-amd64$(touch /tmp/x)"),
     "kernel.abi", "a command substitution in the kernel ABI"),
    ("package-metachar", H100, put("driver.packages", ["nvidia-driver;reboot"]),
     "driver.packages", "a shell separator in a package name"),
    ("url-backtick", H100, put("driver.source.url", "http://deb.debian.org/`id`"),
     "driver.source.url", "a backtick in a repository URL"),
    ("vendor-mismatch", H100, put("accelerator.vendor", "amd"), "vendor",
     "an AMD accelerator on an NVIDIA driver"),
    ("branch-int", H100, put("driver.branch", 535), "driver.branch",
     "a driver branch written as an integer"),
    ("version-off-branch", H100, put("driver.version", "550.54.15-1"), "driver.version",
     "a driver version from another branch"),
    ("cuda-newer-than-driver", H100, put("userland.cuda", "12.4"), "userland.cuda",
     "a CUDA userland newer than the driver branch runs"),
]


def _validate(path: Path) -> tuple[str, ...]:
    return ("spec", "validate", str(path))


# Each command that loads a class by file, in turn, so every path to load_class is covered.
COMMANDS: list[Callable[[Path], tuple[str, ...]]] = [
    _validate,
    lambda p: ("spec", "show", str(p)),
    _validate,
    lambda p: ("spec", "vars", str(p), "--for", "packer"),
]


def _text(base: Base, name: str) -> str:
    return yaml.safe_dump(base.classes[name], sort_keys=False)


def _raw_cases(base: Base) -> list[tuple[str, str | bytes, str, str]]:
    """(id, file content, field that must be named or "", the mistake)"""
    cpu = _text(base, CPU)
    return [
        ("empty-file", "", "", "an empty file"),
        ("top-level-list", "- name: lab-cpu\n", "top level", "a list instead of a mapping"),
        ("yaml-unclosed-flow", cpu + "extra: {a: [1, 2\n", "line", "unclosed flow sequence"),
        ("yaml-duplicate-key", cpu + "kernel:\n  abi: 6.1.0-57-cloud-amd64\n"
         "  package_version: 6.1.192-1\n", "kernel", "a duplicate top-level key"),
        ("yaml-python-tag", cpu.replace(
            f"description: {base.classes[CPU]['description']}", "description: "
            f"!!python/object/apply:os.system ['{base.touch('class-yaml-python-tag')}']"),
         "python", "a Python object tag that an unsafe loader would run"),
        ("yaml-too-deep", "name: lab-cpu\ndescription: " + deep_yaml(), "",
         "collections nested past the recursion limit"),
        ("yaml-two-documents", cpu + "---\n" + cpu, "", "two YAML documents in one file"),
        ("yaml-alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
            f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(8)) + cpu, "", "a billion-laughs alias expansion"),
        ("invalid-utf8", cpu.replace("description: ", "description: caf\udce9 ", 1)
         .encode("utf-8", "surrogateescape"), "", "a Latin-1 byte in a UTF-8 file"),
        ("utf16", cpu.encode("utf-16"), "", "saved as UTF-16 (with its BOM)"),
        ("bom-mid-file", cpu.replace("\nkernel:", "\n\ufeffkernel:", 1), "kernel",
         "a byte-order mark pasted before a key"),
        ("nul-byte", cpu.replace("description: ", "description: a\x00b ", 1), "",
         "a NUL byte in the file"),
        ("huge-then-bad", huge_then(cpu + "surprise: 1\n", 65), "",
         "65 MB of comments before an unknown key: refused by size, not parsed for minutes"),
    ]


def entries(base: Base) -> list[Entry]:
    out: list[Entry] = []
    for i, (eid, name, mutation, field, why) in enumerate(MUTATIONS):
        path = write_yaml(base.dir("class", eid) / f"{name}.yml",
                          mutated(base.classes[name], mutation))
        out.append(Entry(f"class-{eid}", "class", COMMANDS[i % len(COMMANDS)](path),
                         (f"{eid}/{name}.yml", field), why, inputs=(path,)))
    for eid, content, field, why in _raw_cases(base):
        path = write(base.dir("class", eid) / "lab-cpu.yml", content)
        out.append(Entry(f"class-{eid}", "class", _validate(path),
                         tuple(x for x in (f"{eid}/lab-cpu.yml", field) if x), why,
                         inputs=(path,)))
    # Not a regular file where a class should be, found by path and by name.
    d = directory(base.dir("class", "directory") / "lab-cpu.yml")
    out.append(Entry("class-directory", "class", ("spec", "show", str(d)),
                     ("directory/lab-cpu.yml", DIR_REASON), "a directory named like a class file"))
    f = fifo(base.dir("class", "fifo") / "lab-cpu.yml")
    out.append(Entry("class-fifo", "class", _validate(f), ("fifo/lab-cpu.yml", FIFO_REASON),
                     "a named pipe as the class file"))
    f = fifo(base.dir("class", "fifo-by-name") / "lab-cpu.yml")
    out.append(Entry("class-fifo-by-name", "class", ("spec", "vars", "lab-cpu"),
                     ("fifo-by-name/lab-cpu.yml", FIFO_REASON),
                     "a named pipe where the class is looked up",
                     env={"FLEETGATE_CLASSES_DIR": str(f.parent)}))
    path = write_yaml(base.dir("class", "by-name-bad") / "lab-cpu.yml",
                      mutated(base.classes[CPU], drop("kernel")))
    out.append(Entry("class-by-name-bad", "class", ("spec", "show", "lab-cpu"),
                     ("by-name-bad/lab-cpu.yml", "kernel"),
                     "a broken class found by name in FLEETGATE_CLASSES_DIR",
                     env={"FLEETGATE_CLASSES_DIR": str(path.parent)}, inputs=(path,)))
    d = base.dir("class", "dir-with-bad")
    write_yaml(d / "lab-cpu.yml", base.classes[CPU])
    path = write_yaml(d / "nvidia-h100-535.yml",
                      mutated(base.classes[H100], put("accelerator.model", "H100; rm -rf /")))
    out.append(Entry("class-dir-with-bad", "class", _validate(d),
                     ("dir-with-bad/nvidia-h100-535.yml", "accelerator.model"),
                     "one bad class among good ones in a directory", inputs=(path,)))
    return out
