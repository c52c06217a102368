"""The cards of this host: every NVIDIA GPU the driver lists, by UUID, whatever a visibility
variable narrows a process to. Recorded with each result (provenance.host_cards), it tells two runs
on other cards of one host from runs on other hosts of one model (fabench.analysis.identity
.pair_type): their noise differs, and so does the smallest change a comparison can see.
Read from the driver's folder, without torch or NVML (0.006 s against NVML's 0.1 s)."""

from __future__ import annotations

import contextlib
from pathlib import Path

NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")


def nvidia_uuids(root: Path = NVIDIA_PROC) -> list[str]:
    """The UUIDs of the driver's GPUs in its folder order (PCI order, NVML's); [] without the folder."""
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir(), key=lambda p: p.name.lower()):
        with contextlib.suppress(OSError, KeyError):  # a GPU going away as it is read
            info = dict(line.split(":", 1) for line in (folder / "information").read_text().splitlines()
                        if ":" in line)
            found.append(info["GPU UUID"].strip())
    return found
