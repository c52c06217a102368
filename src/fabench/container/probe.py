"""What a benchmark image holds, read from inside a container of it.

    python3 -m fabench.container.probe OUT_FILE

The image manifest records versions and paths as found in the image, not as assumed from the
build arguments. This module runs in a short-lived container (fabench is installed in the image)
and writes one JSON object to OUT_FILE, which the host reads back through the archive API.

Standard library only. aiter is never imported (its import loads HIP modules and needs a GPU):
it is found with importlib. torch is imported only to read its build, and a failure is recorded.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

from fabench.aiter_config import DEFAULT_ARCH, MhaConfigNotFound, require_mha_config
from fabench.files import write_json

_ROCM_VERSION_FILES = ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev")
_HIPCONFIG = ("hipconfig", "/opt/rocm/bin/hipconfig")


def version(*names: str) -> str | None:
    """The installed version of the first distribution of `names` that is there."""
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return None


def package_versions() -> dict:
    return {"python": platform.python_version(), "torch": version("torch"),
            "triton": version("triton", "pytorch-triton-rocm", "pytorch-triton"),
            "aiter": version("amd-aiter"), "fabench": version("fabench"), "numpy": version("numpy")}


def torch_build() -> dict:
    """torch's HIP/CUDA build; an import failure is recorded, not raised (the probe must finish)."""
    try:
        import torch
    except Exception as err:
        return {"torch_error": repr(err)}
    return {"torch_hip": getattr(torch.version, "hip", None), "torch_cuda": getattr(torch.version, "cuda", None)}


def rocm_version() -> str | None:
    for name in _ROCM_VERSION_FILES:
        if os.path.exists(name):
            return Path(name).read_text().strip()
    return None


def hip_version() -> str | None:
    for exe in _HIPCONFIG:
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception:  # not installed here, or it hangs: no HIP to report
            continue
        if out:
            return out
    return None


def aiter_paths() -> dict:
    """aiter's package directory and its MHA config, for the arch the image was built for."""
    spec = importlib.util.find_spec("aiter")
    locations = list(spec.submodule_search_locations or []) if spec else []
    aiter_dir = locations[0] if locations else None
    # GPU_ARCHS may list several ("gfx942;gfx950"): the first names the config the jobs patch.
    arch = (os.environ.get("FABENCH_GPU_ARCHS") or DEFAULT_ARCH).split(";")[0]
    try:
        config = require_mha_config(aiter_dir, arch) if aiter_dir else None
    except MhaConfigNotFound as err:
        return {"aiter_dir": aiter_dir, "aiter_mha_config": None, "aiter_mha_config_missing": str(err)}
    return {"aiter_dir": aiter_dir, "aiter_mha_config": str(config) if config else None}


def probe() -> dict:
    return {**package_versions(), **torch_build(), "rocm": rocm_version(), "hip": hip_version(),
            **aiter_paths(), "env": {k: v for k, v in os.environ.items() if k.startswith("FABENCH_")}}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m fabench.container.probe OUT_FILE", file=sys.stderr)
        return 2
    write_json(args[0], probe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
