"""tools/h200_check.py on two small runs made of merged results: the acceptance checks of issue 8."""

from __future__ import annotations

import importlib.util
import json

from fabench.results.merge import merge
from fabench.results.contract import backend_entry
from workflow_util import REPO

spec = importlib.util.spec_from_file_location("h200_check", REPO / "tools" / "h200_check.py")
h200_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(h200_check)


def job(devices: list[float], do_bench: float, variant: str = "tuned") -> dict:
    """A result of one cell whose trials have these device figures, from two processes (one process
    gives no prediction interval, and the check compares where another run should read)."""
    trials = [{"process": i % 2, "index": i, "iters": 100, "wall_mean_ms": 2 * d, "device_ms": d, "warmup_iters": 10,
               "gpu_state": None} for i, d in enumerate(devices)]
    entry = backend_entry("SDPA (cuDNN)", trials=trials)
    entry["trials"][0].update(do_bench_ms=do_bench, host_call_ms=0.001)  # raw, as a process records it
    result = {"schema_version": 2, "variant": variant, "shape_id": "b4-s512-h8-d256", "platform": "cuda", "flops": 1e9,
              "reference": {"status": "ok", "failure_kind": None, "reason": None},
              "method": {"stable_spread": 0.03, "cross_check": {"tolerance": 0.03}, "device_fallbacks": {}},
              "backends": {"sdpa_cudnn": entry}, "provenance": {"process": 0, "finished": "t"}}
    return merge([result], [])


def write_run(directory, *results) -> str:
    directory.mkdir()
    for i, result in enumerate(results):
        (directory / f"{i}.json").write_text(json.dumps(result))
    return str(directory)


def test_two_agreeing_runs_pass(tmp_path, capsys):
    a = write_run(tmp_path / "a", job([0.100, 0.101, 0.102], 0.1005))
    b = write_run(tmp_path / "b", job([0.1008, 0.1012, 0.1009], 0.101))
    assert h200_check.main([a, b]) == 0
    assert "PASS" in capsys.readouterr().out


def test_a_second_run_outside_the_first_runs_interval_fails_unless_flagged(tmp_path, capsys):
    a = write_run(tmp_path / "a", job([0.100, 0.1001, 0.1002], 0.1001))
    b = write_run(tmp_path / "b", job([0.1020, 0.1021, 0.1022], 0.1021))
    assert h200_check.main([a, b]) == 1
    out = capsys.readouterr().out
    assert "outside run A's prediction interval" in out and "median run-to-run spread" in out and "exceeds 1%" in out
    # The comparison policy's verdict beside it: one cell of two processes (1 degree of freedom)
    # cannot tell a 2% change from its noise.
    assert "cannot tell (noisy)" in out


def test_disagreeing_with_do_bench_fails(tmp_path, capsys):
    a = write_run(tmp_path / "a", job([0.100, 0.100, 0.100], 0.110))
    assert h200_check.main([a]) == 1
    assert "vs do_bench" in capsys.readouterr().out


def test_a_results_directory_reads_the_merged_results_not_the_process_files(tmp_path, capsys):
    """The workflow leaves each job's process files beside its result; only the result counts."""
    a = write_run(tmp_path / "a", job([0.100, 0.101, 0.102], 0.1005))
    process_dir = tmp_path / "a" / "b4-s512-h8-d256"
    process_dir.mkdir()
    (process_dir / "process-0.json").write_text(json.dumps(job([0.200, 0.200, 0.200], 0.1005)))
    assert h200_check.main([a]) == 0
    assert "0.1010 [" in capsys.readouterr().out


def test_a_power_capped_cell_is_judged_when_it_agrees_and_excused_when_it_does_not(tmp_path, capsys):
    def capped(devices, do_bench):
        result = job(devices, do_bench)
        result["backends"]["sdpa_cudnn"]["cross_check"].update(agrees=None, reason="GPU power-capped: clocks held down")
        return result

    assert h200_check.main([write_run(tmp_path / "near", capped([0.100, 0.100, 0.100], 0.101))]) == 0
    assert "power cap" not in capsys.readouterr().out.split("|---|")[-1].split("\n")[1]
    assert h200_check.main([write_run(tmp_path / "far", capped([0.100, 0.100, 0.100], 0.110))]) == 0
    assert "do_bench at another clock, power cap" in capsys.readouterr().out
