"""Finding and patching aiter's MHA config, on package trees laid out as aiter's versions lay them out."""

import json

import pytest

from fabench import aiter_config
from fabench.aiter_config import find_mha_config, merge_overrides, patch_local

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
    code = (f"import sys; sys.path.insert(0, {src!r}); import fabench.aiter_config as a, "
            "fabench.container.probe as p; "
            f"assert a.__file__.startswith({src!r}) and p.__file__.startswith({src!r}); "
            "sys.exit('docker' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- aiter's own loader, from the installed package-index release (amd-aiter) ---------------------

import hashlib  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VARIANTS = yaml.safe_load((REPO / "config.yaml").read_text())["variants"]


def _run_python(code: str, *paths: Path) -> subprocess.CompletedProcess:
    """A fresh interpreter (aiter's loader caches per process), with `paths` ahead of site-packages."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO / "src")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_installed_aiter_reads_back_each_variant_from_our_patched_file(tmp_path, variant):
    """amd-aiter from the package index, its real _get_config, on this CPU: the patch step merges the
    variant into aiter's packaged file, and aiter's loader returns exactly the variant's entry."""
    package = aiter_config.installed_aiter_dir()
    assert package is not None and (package / "ops/triton").is_dir(), "amd-aiter is a test dependency"
    out, meta = tmp_path / f"{variant}.json", tmp_path / f"{variant}.meta.json"
    info = patch_local(VARIANTS[variant]["triton"], out, meta)
    assert info["base_path"].endswith("configs/MI300X-MHA-DEFAULT.json")  # named by device in 0.1.7
    proc = _run_python(f"""
        import json, torch
        from fabench.measure.backends import aiter_kernel
        loader, read = aiter_kernel.load_patched("cpu", {str(out)!r}, torch.float16, {str(tmp_path / 'configs')!r})
        print(json.dumps(read))
    """)
    assert proc.returncode == 0, proc.stderr
    read = json.loads(proc.stdout.splitlines()[-1])
    expected = aiter_config.forward_config(json.loads(out.read_text()))
    assert read["read_back"] == expected
    assert {k: expected[k] for k in VARIANTS[variant]["triton"]} == VARIANTS[variant]["triton"]
    assert read["asked_for"] == "MI300X-MHA-DEFAULT.json" and read["aiter"].startswith("amd-aiter 0.1.7")
    placed = tmp_path / "configs" / read["asked_for"]
    assert hashlib.sha256(placed.read_bytes()).hexdigest() == info["patched_sha256"]  # bytes unchanged
    assert aiter_config.file_sha256(info["base_path"]) == info["base_sha256"]  # the package was not written


def test_launch_options_follow_what_tritons_backend_accepts():
    """waves_per_eu is an AMD compile option: Triton's CUDA backend refuses it, its HIP backend takes it."""
    proc = _run_python("""
        import json
        from triton.backends.compiler import GPUTarget
        from fabench.measure.backends import aiter_kernel
        kernel = aiter_kernel.forward_kernel(aiter_kernel.loader_module("cpu"))
        config = {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True, "waves_per_eu": 2, "num_warps": 4,
                  "num_ctas": 1, "num_stages": 1}
        print(json.dumps([aiter_kernel.launch_options(config, kernel, GPUTarget("cuda", 90, 32)),
                          aiter_kernel.launch_options(config, kernel, GPUTarget("hip", "gfx942", 64))]))
    """)
    assert proc.returncode == 0, proc.stderr
    (cuda_applied, cuda_not), (hip_applied, hip_not) = json.loads(proc.stdout.splitlines()[-1])
    assert "waves_per_eu" not in cuda_applied and set(cuda_not) == {"waves_per_eu"}
    assert "not applied on this platform" in cuda_not["waves_per_eu"] and "cuda" in cuda_not["waves_per_eu"]
    assert hip_not == {} and hip_applied["waves_per_eu"] == 2
    assert cuda_applied["BLOCK_M"] == 64 and cuda_applied["PRELOAD_V"] is True


# --- the two git-only layouts, on trees built here by aiter's naming rules ---------------------------
# A loader of our own in each tree follows the rule facts.md records for that aiter (the file is
# {configs}/{arch}-MHA-DEFAULT.json at the report's commit; {configs}/{arch}/triton/attention/mha/
# DEFAULT.json after PR #5019): the runner must find the name by asking it, and place the file there.

LAYOUT_LOADERS = {
    "flat-by-arch": ("ops/triton/_triton_kernels/mha.py", "configs/{arch}-MHA-DEFAULT.json"),
    "per-arch-tree": ("ops/triton/_triton_kernels/attention/mha.py",
                      "configs/{arch}/triton/attention/mha/DEFAULT.json"),
}


def _layout_tree(root: Path, layout: str) -> Path:
    module, name = LAYOUT_LOADERS[layout]
    package = root / "aiter"
    for init in ("", "ops", "ops/triton", "ops/triton/utils", "ops/triton/utils/_triton", "ops/triton/_triton_kernels",
                 "ops/triton/_triton_kernels/attention"):
        (package / init).mkdir(parents=True, exist_ok=True)
        (package / init / "__init__.py").write_text("raise ImportError('the package root needs ROCm')\n"
                                                    if init == "" else "")
    (package / "ops/triton/utils/core.py").write_text(
        "import os\nAITER_TRITON_CONFIGS_PATH = os.path.join(os.path.dirname(__file__), '..', 'configs')\n")
    (package / "ops/triton/utils/_triton/arch_info.py").write_text("def get_arch():\n    return 90\n")
    relative = name.split("/", 1)[1].replace("{arch}", "{arch_info.get_arch()}")
    (package / module).write_text(textwrap.dedent(f"""
        import json
        from aiter.ops.triton.utils._triton import arch_info
        from aiter.ops.triton.utils.core import AITER_TRITON_CONFIGS_PATH

        def _get_config(enable_dropout, dtype):
            if not hasattr(_get_config, "_config_dict"):
                with open(f"{{AITER_TRITON_CONFIGS_PATH}}/{relative}") as file:
                    _get_config._config_dict = json.load(file)
            return _get_config._config_dict["fwd"]["default"]

        def _attn_fwd():
            pass
    """))
    _write(package / "ops/triton" / name.format(arch="gfx942"), PACKAGED)
    return package


@pytest.mark.parametrize("layout", sorted(LAYOUT_LOADERS))
def test_each_git_layout_is_found_patched_and_read_back_under_the_name_its_loader_asks(tmp_path, layout):
    package = _layout_tree(tmp_path / "site", layout)
    expected_name = LAYOUT_LOADERS[layout][1].split("/", 1)[1].format(arch="gfx942")
    assert find_mha_config(package, "gfx942") == package / "ops/triton/configs" / expected_name
    proc = _run_python(f"""
        import json, torch
        from pathlib import Path
        from fabench import aiter_config
        from fabench.measure.backends import aiter_kernel
        out = Path({str(tmp_path / 'tuned.json')!r})
        aiter_config.patch_local({{"BLOCK_M": 64, "PRELOAD_V": True}}, out, out.with_suffix(".meta.json"))
        loader, read = aiter_kernel.load_patched("cpu", out, torch.float16, {str(tmp_path / 'configs')!r})
        print(json.dumps(read))
    """, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    read = json.loads(proc.stdout.splitlines()[-1])
    assert read["asked_for"] == expected_name
    assert read["read_back"] == {**PACKAGED["fwd"]["default"], "BLOCK_M": 64, "PRELOAD_V": True}
    assert json.loads((package / "ops/triton/configs" / expected_name).read_text()) == PACKAGED  # not written


def test_the_device_named_layout_is_found_through_aiters_own_arch_map(tmp_path):
    package = tmp_path / "aiter"
    (package / "ops/triton/utils/_triton").mkdir(parents=True)
    (package / "ops/triton/utils/_triton/arch_info.py").write_text(
        'import triton\n_ARCH_TO_DEVICE = {"gfx942": "MI300X", "gfx950": "MI350X"}\n')
    expected = _write(package / "ops/triton/configs/MI300X-MHA-DEFAULT.json", PACKAGED)
    assert aiter_config.device_name(package, "gfx942") == "MI300X"
    assert find_mha_config(package, "gfx942") == expected
    assert find_mha_config(package, "gfx950") is None


def test_an_aiter_without_the_config_is_refused_with_one_line_naming_version_and_names(tmp_path, monkeypatch):
    package = tmp_path / "aiter"
    (package / "ops/triton/configs").mkdir(parents=True)
    monkeypatch.setattr(aiter_config, "installed_aiter_dir", lambda: package)
    with pytest.raises(aiter_config.MhaConfigNotFound) as caught:
        patch_local({"BLOCK_M": 64}, tmp_path / "t.json", tmp_path / "t.meta.json")
    message = str(caught.value)
    assert "\n" not in message and "gfx942-MHA-DEFAULT.json" in message and "gfx942/**/mha/DEFAULT.json" in message
    assert "version unknown" in message and not (tmp_path / "t.json").exists()


def test_the_unrelated_aiter_of_the_package_index_is_named_as_such(tmp_path):
    (tmp_path / "aiter").mkdir()
    (tmp_path / "aiter" / "__init__.py").write_text("")
    proc = _run_python("from fabench.measure.backends import aiter_kernel; print(aiter_kernel.unavailable_reason())", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not AMD's aiter" in proc.stdout and "amd-aiter" in proc.stdout
