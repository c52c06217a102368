"""aiter's Triton MHA config JSON: find it, merge a variant's overrides, write the patched copy.

aiter reads the forward kernel's BLOCK_M/BLOCK_N/... from a JSON file inside its package (cached
per process), and the file moved between aiter versions, so it is searched for, not assumed.

Two sources for the file, one way to patch it:

* :func:`patch_local`: the aiter installed on this host (the local runtime), or a skeleton when
  there is none (a CPU host: the runner then takes the values from the patched file itself);
* fabench.container.aiter_image.patch_from_image: the file inside the benchmark image (the docker
  runtime), read from the image, never from a running container.

The runner inside the image imports this module, and the image has no docker SDK: nothing here
imports docker at module level, and nothing outside the standard library and fabench.files.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import json
from pathlib import Path

from fabench.files import write_json

# aiter's MHA forward config has lived under three names (all relative to its package directory):
#   configs/{arch}/triton/attention/mha/DEFAULT.json   aiter after PR #5019 (Aug 2026), per arch
#   configs/{arch}-MHA-DEFAULT.json                    aiter at the report's commit (Dec 2025)
#   configs/{device}-MHA-DEFAULT.json                  amd-aiter 0.1.7 on the package index (Nov 2025),
#                                                      named by device: aiter's arch_info maps arch -> device
# The runner does not rely on these names: it asks the installed aiter's own loader which file it
# opens (fabench.measure.backends.aiter_kernel). The patch step needs the packaged file to merge into.
_MHA_CONFIG_GLOBS = ("ops/triton/configs/{arch}/**/mha/DEFAULT.json", "ops/triton/configs/{arch}-MHA-DEFAULT.json",
                     "ops/triton/configs/{device}-MHA-DEFAULT.json")
_ARCH_INFO = "ops/triton/utils/_triton/arch_info.py"
SKELETON = {"fwd": {"default": {}}}
DEFAULT_ARCH = "gfx942"


class MhaConfigNotFound(LookupError):
    """An aiter is installed but none of its files is the MHA forward config for the arch."""


def device_name(package_dir: str | Path, arch: str) -> str | None:
    """The device name aiter's own arch_info gives `arch` (gfx942 -> MI300X), read from its source.

    Read, not imported: arch_info imports Triton, which the patch step's host may not have.
    None when this aiter names its files by arch (no such mapping, or arch not in it).
    """
    source = Path(package_dir) / _ARCH_INFO
    if not source.is_file():
        return None
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_ARCH_TO_DEVICE" for t in node.targets):
            try:
                return ast.literal_eval(node.value).get(arch)
            except (ValueError, AttributeError):
                return None
    return None


def find_mha_config(package_dir: str | Path, arch: str = DEFAULT_ARCH) -> Path | None:
    """Path of the MHA forward config for `arch` inside an aiter package directory, if any."""
    root = Path(package_dir)
    device = device_name(root, arch)
    for pattern in _MHA_CONFIG_GLOBS:
        if "{device}" in pattern and not device:
            continue
        hits = sorted(root.glob(pattern.format(arch=arch, device=device)))
        if hits:
            return hits[0]
    return None


def require_mha_config(package_dir: str | Path, arch: str = DEFAULT_ARCH) -> Path:
    """find_mha_config, or one line naming the aiter version and the names looked for."""
    found = find_mha_config(package_dir, arch)
    if found is None:
        device = device_name(package_dir, arch)
        names = [p.format(arch=arch, device=device) for p in _MHA_CONFIG_GLOBS if device or "{device}" not in p]
        raise MhaConfigNotFound(
            f"{aiter_version(package_dir) or 'aiter (version unknown)'} at {package_dir} has no MHA forward config "
            f"for {arch}: looked for {', '.join(names)}")
    return found


def aiter_version(package_dir: str | Path) -> str | None:
    """The installed distribution's version (amd-aiter from the index or a git build), if recorded."""
    import importlib.metadata  # here: every job's launcher imports this module for file_sha256 alone

    for dist in ("amd-aiter", "aiter"):
        try:
            found = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Path(found.locate_file("aiter")).resolve() == Path(package_dir).resolve():
            return f"{dist} {found.version}"
    return None


def installed_aiter_dir() -> Path | None:
    """Directory of the importable aiter package, found without importing it (import needs ROCm)."""
    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def merge_overrides(base: dict, overrides: dict) -> dict:
    """Merge a variant's overrides into fwd.default; keys the base does not have are an error.

    A base with an empty fwd.default (no aiter to read it from) accepts any key: the schema of
    config.yaml has already restricted them to the ones aiter reads.
    """
    patched = copy.deepcopy(base)
    default = patched.setdefault("fwd", {}).setdefault("default", {})
    if default:
        unknown = sorted(set(overrides) - set(default))
        if unknown:
            raise ValueError(
                f"unknown key(s) for aiter's fwd.default config: {', '.join(unknown)}; "
                f"expected some of: {', '.join(sorted(default))}"
            )
    default.update(overrides)
    return patched


def forward_config(patched: dict) -> dict:
    """The entry fp16 forward without dropout uses."""
    return dict(patched.get("fwd", {}).get("default", {}))


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sidecar_path(patched_path: str | Path) -> Path:
    """``<variant>.json`` -> ``<variant>.meta.json``: where run-job looks for the sidecar."""
    return Path(patched_path).with_suffix(".meta.json")


def patch_local(overrides: dict, out: Path, meta_out: Path, *, arch: str = DEFAULT_ARCH) -> dict:
    """Patch the locally installed aiter's config (or the skeleton) into `out`; sidecar to `meta_out`.

    Nothing is mounted in the local runtime (the runner is given `out`), so mount_target is None.
    Raises ValueError naming the unknown keys, before anything is written.
    """
    aiter_dir = installed_aiter_dir()
    base_path = require_mha_config(aiter_dir, arch) if aiter_dir else None
    raw = base_path.read_bytes() if base_path else None
    info = {**patch_bytes(raw, str(base_path) if base_path else None, overrides, Path(out)), "mount_target": None}
    write_json(meta_out, info)
    return info


def patch_bytes(raw_base: bytes | None, base_path: str | None, overrides: dict, out: Path) -> dict:
    """Merge `overrides` into the base (bytes of aiter's file, None: skeleton), write `out`.

    Returns the sidecar's record of what the file was made from: hashes of both files.
    """
    base = json.loads(raw_base) if raw_base is not None else copy.deepcopy(SKELETON)
    patched = merge_overrides(base, overrides)  # ValueError: unknown keys, nothing written
    write_json(out, patched, sort_keys=True)
    return {
        "base_path": base_path,
        "base_sha256": hashlib.sha256(raw_base).hexdigest() if raw_base is not None else None,
        "patched_sha256": file_sha256(out),
        "overrides": overrides,
    }
