"""aiter's MHA config patched from the file inside the benchmark image (the docker runtime): the
image's file is read from the image, never from a running container, and patched as a local one
(fabench.aiter_config.patch_bytes)."""

from __future__ import annotations

from pathlib import Path

from fabench.aiter_config import patch_bytes
from fabench.container.image import client, load_manifest, read_file_from_image
from fabench.files import write_json


def patch_from_image(manifest: Path, overrides: dict, out: Path, meta_out: Path) -> dict:
    """Patch the config inside the manifest's image into `out`; sidecar to `meta_out`.

    The sidecar names the image's file as mount_target: run-job bind-mounts `out` over it, so
    aiter's own lookup reads the patched values. An image without aiter needs no engine (the
    skeleton is patched). Raises ValueError naming the unknown keys, before anything is written.
    """
    m = load_manifest(manifest)
    target = m.get("aiter_mha_config")
    raw = _read_from_image(m["image_id"], target) if target else None
    info = {
        **patch_bytes(raw, target, overrides, Path(out)),
        "mount_target": target,  # None: nothing to mount over
        "image": m["tag"],
        "image_id": m["image_id"],
        "aiter_commit": m.get("aiter_commit"),
    }
    write_json(meta_out, info)
    return info


def _read_from_image(image_id: str, path: str) -> bytes:
    cli = client()
    try:
        return read_file_from_image(cli, image_id, path)
    finally:
        cli.close()
