"""The FlashAttention-4 backend (`fa4`) without a GPU: registered as the others are, unavailable off
NVIDIA sm90+ with a one-line reason and without importing `flash_attn`, its return value unwrapped,
its kernel told from others', its compile cache under the project's.

Blind side: FlashAttention-4 itself never runs here (it needs an NVIDIA sm90+ GPU): its numbers,
its kernel's name in a profile and its compile time are checked on a GPU (tests/test_gpu_backends.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from fabench.measure.backends import fa4_kernel
from fabench.measure.backends.registry import BACKENDS
from fabench.measure.invocation import CACHE_ENV, COMPILE_CACHE, MEASURING_ENV, measuring_environment
from workflow_util import REPO


def test_it_is_registered_as_a_compiled_backend_the_config_lists_and_the_schema_allows():
    backend = BACKENDS["fa4"]
    assert backend.label == "FlashAttention-4" and backend.compiled
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert "fa4" in schema["definitions"]["backend"]["enum"]
    assert "fa4" in yaml.safe_load((REPO / "config.yaml").read_text())["backends"]


@pytest.mark.parametrize("platform", ["cpu", "rocm"])
def test_off_nvidia_it_is_unavailable_in_one_line_without_asking_the_gpu(platform):
    def no_gpu_here():
        raise AssertionError("the GPU's capability was asked on a host that is not NVIDIA")

    reason = fa4_kernel.unavailable_reason(platform, no_gpu_here)
    assert reason == f"needs an NVIDIA GPU of sm90 or later (this host: {platform})"


@pytest.mark.parametrize("capability", [(8, 0), (8, 9)])
def test_an_nvidia_gpu_before_hopper_is_told_its_architecture(capability):
    reason = fa4_kernel.unavailable_reason("cuda", lambda: capability)
    assert reason == f"needs an NVIDIA GPU of sm90 or later (this GPU: sm{capability[0]}{capability[1]})"


@pytest.mark.skipif(fa4_kernel.installed_version() is not None, reason="flash-attn-4 is installed here")
@pytest.mark.parametrize("capability", [(9, 0), (10, 0)])
def test_on_hopper_and_later_a_missing_package_is_named_with_how_to_install_it(capability):
    reason = fa4_kernel.unavailable_reason("cuda", lambda: capability)
    assert reason.startswith("flash-attn-4 is not installed (") and "envs/gpu.txt" in reason and "\n" not in reason


# A `flash_attn` package that fails on import, with flash-attn-4's metadata beside it: a host where it
# is installed. Whatever imports it fails loudly.
TRIPWIRE = "raise ImportError('flash_attn was imported')\n"


def tripwire_site(root: Path) -> Path:
    (root / "flash_attn").mkdir(parents=True)
    (root / "flash_attn" / "__init__.py").write_text(TRIPWIRE)
    for name, version in (("flash_attn_4", "4.0.0b36"), ("nvidia_cutlass_dsl", "4.8.1")):
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    return root


def test_a_cpu_job_with_flash_attention_installed_never_imports_it(tmp_path):
    """A real CPU cell of the fa4 backend (the harness's own set-up), in a process whose path holds an
    installed-looking flash-attn-4 whose package fails on import: unavailable, and not imported."""
    site = tripwire_site(tmp_path / "site")
    script = textwrap.dedent("""
        import json, sys
        import torch
        from fabench.measure.backends import fa4_kernel
        from fabench.measure.backends.registry import BACKENDS, Problem
        from fabench.measure.inputs import reference_output
        from support.one_backend import measure_backend
        from fabench.measure.job import measurement
        from workflow_util import tiny_config
        from fabench.measure.spec import job_spec
        from fabench.shapes import parse_shape_id
        spec = job_spec(tiny_config(), "tuned", parse_shape_id("b1-s64-h2-d32"))
        job = measurement(spec.settings, "cpu", spec.shape)
        q, k, v = (torch.randn(1, 64, 2, 32).half() for _ in range(3))
        problem = Problem(q, k, v, True, "cpu", {})
        entry = measure_backend(BACKENDS["fa4"], problem, reference_output(q, k, v, True), job)
        print(json.dumps({"installed": fa4_kernel.installed_version(), "status": entry["status"],
                          "reason": entry["reason"], "imported": sorted(m for m in sys.modules if m.startswith("flash_attn"))}))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "src"), str(REPO / "tests")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["installed"] == "4.0.0b36"  # the tripwire is seen as installed: the test can fail
    assert found == {"installed": "4.0.0b36", "status": "unavailable", "imported": [],
                     "reason": "needs an NVIDIA GPU of sm90 or later (this host: cpu)"}


def test_the_tripwire_does_fire_when_imported(tmp_path):
    """The tripwire of the test above is real: importing it fails (else that test could not fail)."""
    site = tripwire_site(tmp_path / "site")
    proc = subprocess.run([sys.executable, "-c", "import flash_attn"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode != 0 and "flash_attn was imported" in proc.stderr


def test_the_output_is_taken_from_the_pair_version_4_returns_or_alone():
    out, lse = torch.ones(1, 4, 2, 8), torch.zeros(1, 2, 4)
    assert fa4_kernel.attention_output((out, lse)) is out
    assert fa4_kernel.attention_output([out, lse]) is out
    assert fa4_kernel.attention_output(out) is out
    with pytest.raises(TypeError, match="empty sequence"):
        fa4_kernel.attention_output(())


def test_its_kernel_is_told_from_any_other():
    ours = "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor0000"
    assert fa4_kernel.not_its_kernel(["void at::native::elementwise_kernel", ours]) is None
    why = fa4_kernel.not_its_kernel(["cudnn_generated_fort_native_sdpa_sm90_knob_7", "void at::native::fill"])
    assert why.startswith("flash_attn_func launched no FlashAttentionForward kernel; kernels seen: cudnn_generated")
    assert fa4_kernel.not_its_kernel([]) is not None


def test_its_compiled_kernels_persist_in_the_projects_compile_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"):
        monkeypatch.delenv(key, raising=False)
    env = measuring_environment()
    assert env["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"] == str(tmp_path / COMPILE_CACHE / "flash-attn-cute")
    assert env["FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"] == "1"  # the package keeps none on disk otherwise
    # Recorded with every result, as Triton's and Inductor's are.
    assert "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR" in CACHE_ENV and "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED" in MEASURING_ENV
