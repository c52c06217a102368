"""The runner as a real process on this machine's CPU, and its failure handling."""

import json
import os
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

from fabench.analysis.figures import tflops
from fabench.analysis.stats import describe
import torch

from fabench.measure import metrics
from fabench.results import merge
from fabench.aiter_config import file_sha256
from fabench.measure.backends.registry import BACKENDS, FallbackError, Problem, flex_kernel_options
from fabench.measure.spec import job_spec
from fabench.planned_platform import planned_platform
from fabench.shapes import parse_shape_id
from fabench.measure.job import classify_failure, measurement
from support.leases import lease_of_its_own
from support.one_backend import measure_backend
from fabench.measure.launch.launcher import no_result
from fabench.measure.spec import Settings
from workflow_util import REPO, tiny_config

RESULT_SCHEMA = json.loads((REPO / "workflow/schemas/result.schema.json").read_text())
TUNED = {"BLOCK_M": 64, "BLOCK_N": 32, "PRELOAD_V": True, "waves_per_eu": 2, "num_warps": 4, "num_ctas": 1,
         "num_stages": 1}


def run_job(tmp_path, config, variant="tuned", shape="b1-s64-h2-d32", extra=(), name="result.json"):
    """The job's process (extra: --process N), or, without --process, its process 0 merged into the
    job's result as the workflow's benchmark rule merges it."""
    spec = job_spec(config, variant, parse_shape_id(shape))
    kernel_config = tmp_path / "aiter.json"
    kernel_config.write_text(json.dumps({"fwd": {"default": TUNED}}))
    out = tmp_path / name
    process = [] if "--process" in extra else ["--process", "0"]
    measured = out if "--process" in extra else tmp_path / f"process-0-{name}"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--aiter-config", str(kernel_config),
           "--out", str(measured), "--project-commit", "abc123", *extra, *process]
    env = {**os.environ, "OMP_NUM_THREADS": "1",  # as Snakemake sets it for a job under --cores 1
           **lease_of_its_own(tmp_path),  # on a GPU host, beside the other GPU tests' jobs (support.leases)
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)  # this checkout's fabench
    assert proc.returncode == 0, proc.stderr
    if measured != out:
        merge = subprocess.run([sys.executable, "-m", "fabench.results.merge", "--out", str(out), str(measured)],
                               capture_output=True, text=True, timeout=300, env=env)
        assert merge.returncode == 0, merge.stderr
    return json.loads(out.read_text()), kernel_config


@pytest.mark.skipif(torch.cuda.is_available(), reason="asserts what a CPU-only host can and cannot run")
def test_cpu_job_measures_what_can_run_and_says_why_the_rest_cannot(tmp_path):
    result, kernel_config = run_job(tmp_path, tiny_config())
    jsonschema.validate(result, RESULT_SCHEMA)
    backends = result["backends"]
    assert result["platform"] == "cpu" and result["shape_id"] == "b1-s64-h2-d32"
    for name in ("native", "sdpa"):
        assert backends[name]["status"] == "ok"
        assert backends[name]["wall_mean_ms"] > 0
        assert backends[name]["correctness"]["passed"]
        assert len(backends[name]["trials"]) == 2 and {t["process"] for t in backends[name]["trials"]} == {0}
        assert backends[name]["stats"]["wall_mean_ms"]["n"] == 2 and backends[name]["device_ms"] is None
        assert backends[name]["cross_check"] is None and backends[name]["kernels"] is None
        assert backends[name]["observations"] == {"notes": [], "do_bench_reason": None}
    assert backends["native"]["correctness"]["max_abs_err"] < 1e-5  # fp32 against the fp32 reference
    assert backends["sdpa"]["correctness"]["max_abs_err"] > 0  # fp16 really differs from fp32
    for name, why in {"ck": "needs ROCm", "triton": "needs a GPU that Triton compiles for", "sdpa_cudnn": "needs CUDA",
                      "sdpa_flash": "needs a GPU", "flex": "left out of CPU jobs by the config",
                      "fa4": "needs an NVIDIA GPU of sm90 or later"}.items():
        assert backends[name]["status"] == "unavailable"
        assert why in backends[name]["reason"]
    loader = result["kernel_config"].pop("aiter_loader")
    assert result["kernel_config"] == {"path": str(kernel_config), "sha256": file_sha256(kernel_config),
                                       "values": TUNED}
    # aiter's own loader (the installed amd-aiter, on this CPU) read the patched file back.
    assert loader["read_back"] == TUNED and loader["asked_for"] == "MI300X-MHA-DEFAULT.json"
    assert loader["aiter"].startswith("amd-aiter ")
    assert result["method"]["reduced"] is True  # the tiny config's CPU block asks for fewer trials
    assert result["method"]["trials"] == 2 and result["method"]["repeats"] == 1
    [ended] = result["method"]["process_exits"]
    assert ended["index"] == 0 and ended["exit_code"] == 0 and ended["wrote_result"] is True
    assert ended["host"] == result["provenance"]["host"] and ended["started"] <= ended["finished"]
    assert result["reference"] == {"status": "ok", "failure_kind": None, "reason": None}
    # every core of the host, whatever OMP_NUM_THREADS Snakemake set for the job
    assert result["method"]["cpu_threads"] == len(os.sched_getaffinity(0))
    provenance = result["provenance"]
    assert provenance["project_commit"] == "abc123"
    assert provenance["torch"] == torch.__version__ and provenance["runtime"] == "local"
    assert len(provenance["config_sha256"]) == 64


@pytest.mark.skipif(torch.cuda.is_available(), reason="counts the processes a CPU measures in")
def test_process_files_merge_into_the_job_keeping_the_processes_that_measured(tmp_path):
    """The workflow's path: each process its own `--process N` run, then the merge. A process that
    wrote no result leaves its exit in the job's method, and the cells the other processes measured
    are failed with why, their trials kept; a process beyond the CPU's count (cpu.repeats 1) writes
    a marker the merge skips."""
    config = tiny_config(backends=["native", "sdpa"], roles={p: {"baseline": "native", "vendor": "sdpa",
                                                                 "triton": "native"} for p in ("cpu", "cuda", "rocm")})
    measured, kernel_config = run_job(tmp_path, config, extra=["--process", "0"], name="process-0.json")
    skipped, _ = run_job(tmp_path, config, extra=["--process", "1"], name="process-1.json")
    assert set(skipped) == {merge.SKIPPED_KEY} and "not needed" in skipped[merge.SKIPPED_KEY]
    # A process records raw observations only: no statistic, which the merge's analysis derives.
    assert measured["backends"]["native"]["stats"] is None and measured["backends"]["native"]["trials"]
    # The runner's record of a process that wrote none, made here without starting one (and without torch).
    killed = no_result(job_spec(config, "tuned", parse_shape_id("b1-s64-h2-d32")), "cpu", str(kernel_config),
                       "abc123", [{"index": 2, "exit_code": -9, "wrote_result": False}])
    (tmp_path / "process-2.json").write_text(json.dumps(killed))

    files = [tmp_path / f"process-{i}.json" for i in (2, 1, 0)]
    job = merge.merge_files(files)
    jsonschema.validate(job, RESULT_SCHEMA)
    assert [(p["index"], p["wrote_result"]) for p in job["method"]["process_exits"]] == [(0, True), (2, False)]
    native = job["backends"]["native"]
    # Not "ok" from the process that was left: failed, saying which process was lost and why.
    assert native["status"] == "failed" and native["reason"].startswith("process 2 was killed by SIGKILL")
    assert "figures are of process 0 alone" in native["reason"]
    assert {t["process"] for t in native["trials"]} == {0} and native["stats"]["wall_mean_ms"]["n"] == 2

    alone = merge.merge_files([tmp_path / "process-2.json"])
    jsonschema.validate(alone, RESULT_SCHEMA)
    assert alone["backends"]["native"]["status"] == "failed" and "SIGKILL" in alone["backends"]["native"]["reason"]
    assert merge.PROCESS_FAILED_KEY not in alone
    with pytest.raises(ValueError, match="no process file"):
        merge.merge_files([tmp_path / "process-1.json"])


def test_wrong_numbers_become_a_failed_cell_and_the_job_goes_on(tmp_path):
    config = tiny_config(tolerance={"max_abs_err": 1e-5, "min_cosine": 0.999})  # fp32 passes, fp16 not
    result, _ = run_job(tmp_path, config)
    sdpa = result["backends"]["sdpa"]
    assert sdpa["status"] == "failed" and sdpa["failure_kind"] == "correctness"
    assert "wrong numbers" in sdpa["reason"]
    assert sdpa["wall_mean_ms"] > 0  # still timed: the cell says how fast the wrong answer was
    assert result["backends"]["native"]["status"] == "ok"


def test_a_backend_that_raises_is_recorded_not_propagated():
    q = torch.randn(1, 16, 2, 32)
    k = torch.randn(1, 16, 2, 16)  # head_dim disagrees with q: every backend must raise
    problem = Problem(q, k, k, True, "cpu", TUNED)
    settings = Settings.of(tiny_config(tolerance={"max_abs_err": 1, "min_cosine": 0}))
    job = measurement(settings, "cpu", job_spec(tiny_config(), "tuned", parse_shape_id("b1-s16-h2-d32")).shape)
    entry = measure_backend(BACKENDS["native"], problem, q, job)
    assert entry["status"] == "failed" and entry["failure_kind"] == "error"
    assert entry["reason"].startswith("RuntimeError")


class _TritonOutOfResources(Exception):
    """Shaped as triton.runtime.errors.OutOfResources (required, limit, name); Triton is not on a CPU host."""

    def __init__(self, required, limit, name):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}")


def _inductor_style_out_of_resources():
    # Inductor re-raises with the kernel's name where Triton put the resource's (seen on an H200).
    try:
        try:
            raise _TritonOutOfResources(262144, 232448, "shared memory")
        except _TritonOutOfResources as inner:
            raise RuntimeError("out of resource: triton_tem_fused_flex_attention_0 Required: 262144 "
                               "Hardware limit:232448 Reducing block sizes or `num_stages` may help.") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("error, kind, words", [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", "out of memory"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"), "oom",
     "out of memory: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory"),
    (MemoryError(), "oom", "out of memory"),
    (RuntimeError("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144, "
                  "Hardware limit: 232448. Reducing block sizes or `num_stages` may help."),
     "out_of_resources", "out of shared memory: out of resource: shared memory, Required: 262144"),
    (RuntimeError("No available kernel. Aborting execution."), "unsupported", "No available kernel"),
    (_inductor_style_out_of_resources(), "out_of_resources",
     "out of shared memory: out of resource: triton_tem_fused_flex_attention_0 Required: 262144"),
    (FallbackError("compiled FlexAttention ran no Triton kernel"), "fallback", "ran no Triton kernel"),
    (ValueError("something else"), "error", "ValueError: something else"),
])
def test_failures_are_classified_with_their_reason(error, kind, words):
    got_kind, reason = classify_failure(error)
    assert got_kind == kind
    assert words in reason


def test_flex_gets_the_keys_it_understands_and_names_the_rest():
    options, ignored = flex_kernel_options(TUNED)
    assert options == {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    assert ignored == ["PRELOAD_V", "num_ctas", "waves_per_eu"]


def test_metrics():
    assert metrics.attention_flops(4, 4096, 8, 256, causal=True) == 4 * 4 * 8 * 4096**2 * 256 / 2
    assert metrics.attention_flops(1, 2, 1, 1, causal=False) == 16
    summary = describe([float(x) for x in range(1, 12)])
    assert (summary["median"], summary["p10"], summary["p90"], summary["n"]) == (6.0, 2.0, 10.0, 11)
    assert tflops(1e12, 1000.0) == pytest.approx(1.0)
    assert tflops(1e12, None) is None


def test_the_textbook_reference_agrees_with_sdpa_math():
    """The reference on a torch without SDPA (Debian's 1.13 in the platform test) is the same function."""
    from fabench.measure.inputs import _textbook_attention

    q, k, v = (torch.randn(1, 2, 48, 16) for _ in range(3))
    for causal in (True, False):
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert torch.allclose(_textbook_attention(q, k, v, is_causal=causal), expected, atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles FlexAttention for a CPU")
def test_compiled_flex_attention_is_measured_on_a_cpu(tmp_path):
    """Inductor compiles FlexAttention to C++ on a CPU: measured, checked and proven compiled."""
    config = tiny_config()
    config["cpu"] = {key: value for key, value in config["cpu"].items() if key != "leave_out"}
    config["backends"] = ["native", "sdpa", "flex"]
    config["roles"] = {p: {"baseline": "native", "vendor": "sdpa", "triton": "flex"} for p in ("rocm", "cuda", "cpu")}
    result, _ = run_job(tmp_path, config)
    flex = result["backends"]["flex"]
    assert flex["status"] == "ok", flex["reason"]
    assert flex["correctness"]["passed"] and flex["compile_s"] > 0
    assert flex["kernel_config"]["kernel_options"] == {k: TUNED[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps",
                                                                              "num_stages")}


@pytest.mark.skipif(torch.cuda.is_available(), reason="profiles the CPU path")
def test_an_uncompiled_flex_call_on_a_cpu_is_caught_as_a_fallback():
    from torch.nn.attention.flex_attention import flex_attention

    from fabench.measure.backends.registry import _require_compiled_code

    q = torch.randn(1, 2, 64, 32)
    with pytest.raises(FallbackError, match="ran no Inductor graph"):
        _require_compiled_code(lambda: flex_attention(q, q, q), "cpu")


def test_a_measuring_process_past_its_timeout_is_killed_and_its_cell_failed_with_why(tmp_path):
    """Isolate mode: a hung measuring process (frozen here) is killed after --timeout-s; its
    process file says so for every backend, as for any process that wrote no result."""
    # The plan's platform in the spec, as the workflow writes it; a timeout past the process's start-up
    # (torch, the GPU and aiter took over 4 s on an H100), so that it times the hang.
    spec = job_spec(tiny_config(), "tuned", parse_shape_id("b1-s64-h2-d32"), platform=planned_platform(docker=False))
    timeout_s = 4 if spec.platform == "cpu" else 45
    out = tmp_path / "process-0.json"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--out", str(out),
           "--project-commit", "abc123", "--process", "0", "--mode", "isolate", "--timeout-s", str(timeout_s)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **lease_of_its_own(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in runner.stdout:
        if "native: setting up" in line:
            break
    [measuring] = subprocess.run(["pgrep", "-P", str(runner.pid)], capture_output=True, text=True).stdout.split()
    os.kill(int(measuring), signal.SIGSTOP)
    runner.communicate(timeout=120)
    assert runner.returncode == 0
    result = json.loads(out.read_text())
    assert result[merge.PROCESS_FAILED_KEY] is True
    [ended] = result["method"]["process_exits"]
    assert ended["reason"] == f"timed out after {timeout_s} s (measure.job_timeout_s): its measuring process was killed" \
        and ended["exit_code"] == -9
    native = result["backends"]["native"]
    assert native["status"] == "failed" and native["reason"].endswith(
        f"no process of the job wrote a result: process 0 timed out after {timeout_s} s (measure.job_timeout_s): its measuring "
        "process was killed")


def test_a_measuring_process_killed_at_its_timeout_leaves_no_temporary_folder(tmp_path):
    """The process's own folder of aiter configs (fabench.places.process_scratch) is there while it
    measures; killed at its timeout it cannot remove it, and its launcher does. Blind side: a
    launcher killed too leaves the folder to the next measuring process's sweep, not run here."""
    spec = job_spec(tiny_config(), "tuned", parse_shape_id("b1-s512-h2-d64"), platform=planned_platform(docker=False))
    kernel_config = tmp_path / "aiter.json"
    kernel_config.write_text(json.dumps({"fwd": {"default": TUNED}}))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--out", str(tmp_path / "process-0.json"),
           "--aiter-config", str(kernel_config), "--process", "0", "--mode", "isolate",
           "--timeout-s", "15" if spec.platform == "cpu" else "60"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch), **lease_of_its_own(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    runner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # Frozen as soon as its folder is there (aiter's loader reads the variant's config from it, before
    # any backend is set up), so that no load on this host lets the job finish first.
    deadline = time.monotonic() + 120
    while not (folders := list(scratch.glob("fabench-aiter-configs-*"))):
        assert time.monotonic() < deadline and runner.poll() is None, "the measuring process made no folder"
        time.sleep(0.01)
    [measuring] = subprocess.run(["pgrep", "-P", str(runner.pid)], capture_output=True, text=True).stdout.split()
    os.kill(int(measuring), signal.SIGSTOP)
    assert [f"-{measuring}-" in folder.name for folder in folders] == [True]
    assert runner.wait(timeout=180) == 0
    assert "timed out" in json.loads((tmp_path / "process-0.json").read_text())["method"]["process_exits"][0]["reason"]
    assert not list(scratch.iterdir())
