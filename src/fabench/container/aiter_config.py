"""aiter's Triton MHA config JSON: find it in an installed aiter, patch it per variant.

aiter reads the forward kernel's BLOCK_M/BLOCK_N/... from a JSON file inside its package (cached
per process), and the file moved between aiter versions, so it is searched for, not assumed.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

# Newest layout first: configs/{arch}/triton/attention/mha/DEFAULT.json, then the flat
# configs/{arch}-MHA-DEFAULT.json of aiter around the end of 2025.
_MHA_CONFIG_GLOBS = ("ops/triton/configs/{arch}/**/mha/DEFAULT.json", "ops/triton/configs/{arch}-MHA-DEFAULT.json")
SKELETON = {"fwd": {"default": {}}}


def find_mha_config(package_dir: str | Path, arch: str = "gfx942") -> Path | None:
    """Path of the MHA forward config for `arch` inside an aiter package directory, if any."""
    root = Path(package_dir)
    for pattern in _MHA_CONFIG_GLOBS:
        hits = sorted(root.glob(pattern.format(arch=arch)))
        if hits:
            return hits[0]
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
    """``<variant>.json`` -> ``<variant>.meta.json``: what the patched file was made from."""
    return Path(patched_path).with_suffix(".meta.json")


def write_patched(base: dict, overrides: dict, out: Path) -> dict:
    """Merge the overrides into `base`, write the result to `out`, return what the sidecar records."""
    patched = merge_overrides(base, overrides)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(patched, indent=2, sort_keys=True) + "\n")
    return {"patched_sha256": file_sha256(out), "overrides": overrides}


def patch_file(base_path: Path | None, overrides: dict, out: Path) -> dict:
    """Patch a config file on this host (or the skeleton when there is none)."""
    base = json.loads(base_path.read_text()) if base_path else copy.deepcopy(SKELETON)
    return {"base_path": str(base_path) if base_path else None,
            "base_sha256": file_sha256(base_path) if base_path else None,
            **write_patched(base, overrides, out)}


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabench.container.aiter_config", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    patch = sub.add_parser("patch", help="patch the locally installed aiter's MHA config (or a skeleton)")
    patch.add_argument("--overrides", required=True, help="JSON object merged into fwd.default")
    patch.add_argument("--out", required=True, type=Path)
    patch.add_argument("--arch", default="gfx942")
    args = parser.parse_args(argv)

    aiter_dir = installed_aiter_dir()
    base = find_mha_config(aiter_dir, args.arch) if aiter_dir else None
    try:
        info = patch_file(base, json.loads(args.overrides), args.out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    info["mount_target"] = None  # local runtime: nothing is mounted, the runner passes the config
    sidecar_path(args.out).write_text(json.dumps(info, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main())


def patch_local(overrides: dict, out: Path, meta_out: Path) -> dict:
    """Patch the locally installed aiter's MHA config (or the skeleton without aiter)."""
    from fabench.files import write_json

    aiter_dir = installed_aiter_dir()
    base = find_mha_config(aiter_dir) if aiter_dir else None
    info = {**patch_file(base, overrides, out), "mount_target": None}
    write_json(meta_out, info)
    return info
