"""Which physical GPU measured a result (provenance.gpu): read without failing, in the schema, in
the report. What needs a GPU is in test_gpu_backends.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from fabench.measure.device.gpu_state import IDENTITY_KEYS, GpuState, _fields
from fabench.measure.launch import devices
from fabench.report.render import render
from fabench.results.collect import collect, result_schema

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ONE = FIXTURES / "results" / "default" / "b4-s512-h8-d256.json"
H200 = sorted((FIXTURES / "h200-run").glob("*.json"))

# As NVML reports an H200 (the serial and UUID made up).
H200_GPU = {"uuid": "GPU-5d2c0e7a-1111-2222-3333-444455556666", "serial": "1650124000001",
            "pci_bus_id": "00000000:19:00.0", "name": "NVIDIA H200", "vbios": "96.00.99.00.01",
            "power_limit_w": 700.0, "default_power_limit_w": 700.0, "max_sm_clock_mhz": 1980,
            "max_mem_clock_mhz": 3201, "persistence_mode": True, "index": 0}


def test_a_cpu_has_no_gpu_identity():
    assert GpuState("cpu").identity() is None


def test_a_cpu_result_records_gpu_as_null(validator):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("asserts what a CPU-only host records")
    from fabench.measure.spec import job_spec
    from fabench.measure.job import run_job
    from workflow_util import tiny_config

    spec = job_spec(tiny_config(backends=["native"]), "tuned", {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32})
    from fabench.analysis import analyse_run

    # The job's result, measured on this CPU and analysed as the collector has it.
    result = analyse_run({"results": [run_job(spec, None, "test")]})["results"][0]
    assert "gpu" in result["provenance"] and result["provenance"]["gpu"] is None
    validator.validate(result)


def test_a_field_that_cannot_be_read_is_null_and_the_rest_are_kept():
    def broken():
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    found = _fields({"uuid": lambda: "GPU-x", "serial": broken, "power_limit_w": lambda: 700.0})
    assert list(found) == list(IDENTITY_KEYS)
    assert found["uuid"] == "GPU-x" and found["power_limit_w"] == 700.0
    assert found["serial"] is None and found["vbios"] is None


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft202012Validator(result_schema())


def with_gpu(gpu) -> dict:
    result = json.loads(ONE.read_text())
    result["provenance"]["gpu"] = gpu
    return result


@pytest.mark.parametrize("gpu", [H200_GPU, dict.fromkeys(IDENTITY_KEYS), None, {"uuid": "GPU-x"}],
                         ids=["nvml", "nothing-readable", "cpu", "fewer-keys"])
def test_schema_accepts_a_gpu_identity(validator, gpu):
    validator.validate(with_gpu(gpu))


def test_schema_accepts_a_result_without_gpu_as_archived_results_are(validator):
    result = json.loads(ONE.read_text())
    assert "gpu" not in result["provenance"]
    validator.validate(result)


@pytest.mark.parametrize("change", [
    {"uuid": 123}, {"power_limit_w": "700 W"}, {"power_limit_w": -1}, {"persistence_mode": "Enabled"},
    {"index": 0.5}, {"max_sm_clock_mhz": "N/A"},
])
def test_schema_rejects_a_wrongly_typed_field(validator, change):
    errors = list(validator.iter_errors(with_gpu({**H200_GPU, **change})))
    assert errors and all(list(e.absolute_path)[:2] == ["provenance", "gpu"] for e in errors), errors


def test_schema_rejects_a_gpu_that_is_not_an_object(validator):
    assert list(validator.iter_errors(with_gpu(H200_GPU["uuid"])))


def render_h200(tmp_path: Path, gpus: list) -> str:
    """The H200 fixture run rendered, its jobs' provenance.gpu set from `gpus` (one per job, or
    left out where the entry is ...)."""
    config = json.loads((FIXTURES / "config.json").read_text())
    paths = []
    for i, (path, gpu) in enumerate(zip(H200, gpus)):
        result = json.loads(path.read_text())
        if gpu is not ...:
            result["provenance"]["gpu"] = copy.deepcopy(gpu)
        paths.append(tmp_path / f"{i}-{path.name}")
        paths[-1].write_text(json.dumps(result))
    return render(collect(paths, list(config["variants"])), config, None)


def hardware(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("#### Hardware") + 1
    return [line for line in lines[start:] if line.startswith("- ")][:10]


def test_report_names_the_gpu_and_its_power_limit_beside_the_device(tmp_path):
    lines = hardware(render_h200(tmp_path, [H200_GPU] * len(H200)))
    assert lines[:3] == ["- **Device**: NVIDIA H200", f"- **GPU UUID**: {H200_GPU['uuid']}",
                         "- **Power limit**: 700 W"]


def test_report_says_when_jobs_ran_on_different_gpus(tmp_path):
    other = {**H200_GPU, "uuid": "GPU-0000", "power_limit_w": 500.0}
    lines = hardware(render_h200(tmp_path, [H200_GPU, other] + [...] * (len(H200) - 2)))
    assert f"- **GPU UUID**: {H200_GPU['uuid']}; GPU-0000 (differs between jobs)" in lines
    assert "- **Power limit**: 700 W; 500 W (differs between jobs)" in lines


@pytest.mark.parametrize("gpu", [..., None, dict.fromkeys(IDENTITY_KEYS)], ids=["absent", "cpu", "unreadable"])
def test_report_leaves_the_lines_out_without_an_identity(tmp_path, gpu):
    lines = hardware(render_h200(tmp_path, [gpu] * len(H200)))
    assert lines[0] == "- **Device**: NVIDIA H200"
    assert not any("GPU UUID" in line or "Power limit" in line for line in lines)


@pytest.mark.skipif(not devices.NVIDIA_PROC.is_dir() or not devices.nvidia_gpus(),
                    reason="needs an NVIDIA host: the driver's folder and NVML")
def test_the_drivers_folder_names_the_gpus_nvml_names_in_its_order():
    """Every job's lease reads the driver's folder first (0.006 s against NVML's 0.1 s on an H200
    host): it must name the GPUs NVML does, in NVML's index order. Blind side: hosts whose GPUs it
    cannot see; a container's masked folder is not tested."""
    assert [g.visible for g in devices.nvidia_proc_gpus()] == [g.visible for g in devices.nvidia_gpus()]
