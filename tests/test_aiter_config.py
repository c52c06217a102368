"""Finding and patching aiter's MHA config, on package trees laid out as aiter's versions lay them out."""

import json

import pytest

from fabench.container import aiter_config
from fabench.container.aiter_config import find_mha_config, merge_overrides, patch_local

PACKAGED = {"fwd": {"default": {"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "num_warps": 4},
                    "dropout_or_fp32": {"BLOCK_M": 32}}}


def _write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def test_finds_the_flat_layout_of_late_2025(tmp_path):
    expected = _write(tmp_path / "ops/triton/configs/gfx942-MHA-DEFAULT.json", PACKAGED)
    _write(tmp_path / "ops/triton/configs/gfx950-MHA-DEFAULT.json", PACKAGED)
    assert find_mha_config(tmp_path, "gfx942") == expected


def test_finds_the_per_arch_tree_of_later_versions(tmp_path):
    expected = _write(tmp_path / "ops/triton/configs/gfx942/triton/attention/mha/DEFAULT.json", PACKAGED)
    assert find_mha_config(tmp_path, "gfx942") == expected
    assert find_mha_config(tmp_path, "gfx950") is None


def test_merge_is_partial_and_rejects_unknown_keys():
    patched = merge_overrides(PACKAGED, {"BLOCK_N": 32, "PRELOAD_V": True})
    assert patched["fwd"]["default"] == {"BLOCK_M": 128, "BLOCK_N": 32, "PRELOAD_V": True, "num_warps": 4}
    assert patched["fwd"]["dropout_or_fp32"] == {"BLOCK_M": 32}
    assert PACKAGED["fwd"]["default"]["BLOCK_N"] == 64  # the base is not modified
    with pytest.raises(ValueError, match="unknown key.*BLOCK_K"):
        merge_overrides(PACKAGED, {"BLOCK_K": 4})


def test_patch_local_reads_the_installed_aiter_and_records_hashes(tmp_path, monkeypatch):
    package = tmp_path / "site" / "aiter"
    base = _write(package / "ops/triton/configs/gfx942-MHA-DEFAULT.json", PACKAGED)
    monkeypatch.setattr(aiter_config, "installed_aiter_dir", lambda: package)
    out, meta = tmp_path / "out/tuned.json", tmp_path / "out/tuned.meta.json"
    info = patch_local({"BLOCK_M": 64}, out, meta)
    patched = json.loads(out.read_text())
    assert patched["fwd"]["default"]["BLOCK_M"] == 64 and patched["fwd"]["dropout_or_fp32"] == {"BLOCK_M": 32}
    assert json.loads(meta.read_text()) == info
    assert info["base_path"] == str(base) and info["base_sha256"] == aiter_config.file_sha256(base)
    assert info["patched_sha256"] == aiter_config.file_sha256(out) and info["mount_target"] is None


def test_patch_local_without_aiter_writes_the_variant_into_a_skeleton(tmp_path, monkeypatch):
    monkeypatch.setattr(aiter_config, "installed_aiter_dir", lambda: None)
    out, meta = tmp_path / "tuned.json", tmp_path / "tuned.meta.json"
    info = patch_local({"BLOCK_M": 64, "PRELOAD_V": True}, out, meta)
    assert json.loads(out.read_text()) == {"fwd": {"default": {"BLOCK_M": 64, "PRELOAD_V": True}}}
    assert info["base_path"] is None and info["base_sha256"] is None
    assert json.loads(meta.read_text()) == info


def test_patch_local_rejects_unknown_keys_before_writing(tmp_path, monkeypatch):
    package = tmp_path / "aiter"
    _write(package / "ops/triton/configs/gfx942/triton/attention/mha/DEFAULT.json", PACKAGED)
    monkeypatch.setattr(aiter_config, "installed_aiter_dir", lambda: package)
    out, meta = tmp_path / "out/tuned.json", tmp_path / "out/tuned.meta.json"
    with pytest.raises(ValueError, match="BLOCK_K"):
        patch_local({"BLOCK_K": 16}, out, meta)
    assert not out.exists() and not meta.exists()


def test_the_runner_side_never_imports_docker():
    """The image's runner imports aiter_config and the probe; the image has no docker SDK."""
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    code = (f"import sys; sys.path.insert(0, {src!r}); import fabench.container.aiter_config as a, "
            "fabench.container.probe as p; "
            f"assert a.__file__.startswith({src!r}) and p.__file__.startswith({src!r}); "
            "sys.exit('docker' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
