"""Finding and patching aiter's MHA config, on package trees laid out as aiter's versions lay them out."""

import json
import subprocess
import sys

import pytest

from fabench.container.aiter_config import find_mha_config, merge_overrides, patch_file

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


def test_patch_file_records_hashes(tmp_path):
    base = _write(tmp_path / "base.json", PACKAGED)
    info = patch_file(base, {"BLOCK_M": 64}, tmp_path / "out/tuned.json")
    assert json.loads((tmp_path / "out/tuned.json").read_text())["fwd"]["default"]["BLOCK_M"] == 64
    assert info["base_path"] == str(base) and len(info["patched_sha256"]) == 64


def test_patch_cli_without_aiter_writes_the_variant_into_a_skeleton(tmp_path):
    out = tmp_path / "tuned.json"
    proc = subprocess.run([sys.executable, "-m", "fabench.container.aiter_config", "patch", "--overrides",
                           '{"BLOCK_M": 64, "PRELOAD_V": true}', "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {"fwd": {"default": {"BLOCK_M": 64, "PRELOAD_V": True}}}
    assert json.loads(out.with_suffix(".meta.json").read_text())["base_path"] is None
