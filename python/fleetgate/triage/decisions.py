"""The article's decisions, one per finding kind: what the operator does next.

Source: the seed article's "Practical tasks" (each task's "Decision") and its fast-diagnosis
plan (first / second / third / fourth). Kept as data so the walk and its tests share them.
"""

from __future__ import annotations

DECISIONS: dict[str, str] = {
    # Stage 1, tasks 1 and 3 and the plan's "first"
    "gpu-missing": "GPUs are missing: stop and fix the driver / kernel / hardware before "
                   "touching frameworks. Nothing above this matters until every device is "
                   "visible.",
    "rocm-unhealthy": "ROCk/HSA is not healthy: do not blame the model. Fix the kernel "
                      "modules, the firmware and the supported distro/kernel combination.",
    # Stage 1, task 13 and the plan's "first"
    "kernel-gpu-error": "Hardware, power, firmware or PCIe integrity: not a framework bug. "
                        "Quarantine the node (do not retry until it passes), check power, "
                        "cables, BIOS and firmware, and consider an RMA if it recurs.",
    # Stage 2, task 4 and the plan's "second"
    "low-sm": "SM utilisation is low: do not buy more GPUs. Profile the input pipeline, CPU "
              "pinning and batch size first; suspect data loaders, small batches, sync points "
              "or Python overhead.",
    "memory-bound": "Memory is busy while SM stays low: suspect a memory-bound kernel or "
                    "library, or poor fusion.",
    # Stage 3, tasks 5, 6, 11 and the plan's "third"
    "disk-saturated": "The disk is saturated and the CPU waits on I/O: fix dataset staging / "
                      "caching before tuning kernels.",
    "iowait": "The CPU waits on I/O: fix dataset staging / caching before tuning kernels.",
    "cpu-throttled": "CPU throttling masquerades as a slow GPU: give the host (or pod) the "
                     "CPU its data loaders need -- raise or drop the CPU quota -- then pin CPU "
                     "and memory in the orchestrator.",
    # Stage 4, tasks 10 and 12, mistake 3 and the plan's "fourth"
    "nic-drops": "Dropped packets break collective performance and cause timeouts that look "
                 "like GPU problems: investigate NIC queues, MTU, congestion control and the "
                 "switch configuration.",
    "nccl-nic": "Multi-node training hangs on the wrong NIC: pin communications to the right "
                "NIC (NCCL_SOCKET_IFNAME / NCCL_IB_HCA), enable NCCL_DEBUG=INFO and check the "
                "choice before blaming the network.",
}

# Advice that accompanies a stage without making it the explanation.
NOTES: dict[str, str] = {
    "numa-split": "GPUs sit on different NUMA nodes: pin processes and data loaders to their "
                  "GPU's node, or expect mysterious scaling problems.",
    "numa-multi": "Several NUMA nodes: if the input pipeline is CPU/NUMA sensitive, apply CPU "
                  "and memory pinning in the orchestrator.",
    "nccl-unset": "No NCCL_* variable is set: NCCL picks the interface by itself. Pin "
                  "NCCL_SOCKET_IFNAME on multi-NIC hosts and set NCCL_DEBUG=INFO when "
                  "multi-node training is unstable.",
}
