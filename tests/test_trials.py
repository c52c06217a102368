"""Trials on this machine's CPU through the real code paths: a backend whose trials disagree is
flagged unstable, the schema rejects an ok backend without trials, and a job whose fp32
reference does not fit in memory still writes a result (a real runner process under a memory limit)."""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
import time

import jsonschema

from fabench.analysis import analyse_run
from fabench.analysis.entry import analyse_result
import pytest
import torch

from fabench.measure.spec import job_spec
from fabench.measure.backends.registry import BACKENDS, Backend, Prepared
from fabench.measure.cell import trial_order
from fabench.measure.inputs import reference_output
from fabench.measure.job import run_job
from fabench.results.collect import ResultError, collect, result_schema
from workflow_util import REPO, tiny_config

SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only: GPU jobs time differently")


def stand_in(name: str, sleep_ms) -> Backend:
    """A backend whose call sleeps sleep_ms(call number) and returns the right answer."""
    calls = {"n": 0}

    def prepare(problem):
        answer = reference_output(problem.q, problem.k, problem.v, problem.causal)

        def fn():
            calls["n"] += 1
            time.sleep(sleep_ms(calls["n"]) / 1000.0)
            return answer

        return Prepared(fn=fn)

    return Backend(name, name.title(), lambda platform: None, prepare)


def test_a_backend_whose_trials_disagree_is_flagged_unstable(monkeypatch):
    # Each trial is 1 warm-up + 2 timed calls (plus the first, checked call): the drifting stand-in
    # sleeps 10, 15, 20 ms in trials 1, 2, 3, the steady one 10 ms every time.
    monkeypatch.setitem(BACKENDS, "drifting", stand_in("drifting", lambda n: 5.0 * (1 + n // 3)))
    monkeypatch.setitem(BACKENDS, "steady", stand_in("steady", lambda n: 10.0))
    config = tiny_config(backends=["drifting", "steady"])
    config["cpu"].update(warmup=1, iters=2, trials=3)
    config["timing"]["stable_spread"] = 0.5  # generous: a busy 2-core host must not upset `steady`
    raw = run_job(job_spec(config, "tuned", SHAPE), None, "test")
    assert all(e["stats"] is None for e in raw["backends"].values())  # a process records no statistics
    result = analyse_result(raw)
    drifting, steady = result["backends"]["drifting"], result["backends"]["steady"]
    for entry in (drifting, steady):
        assert entry["status"] == "ok" and len(entry["trials"]) == 3
        assert [t["index"] for t in entry["trials"]] == [0, 1, 2] and entry["stats"]["wall_mean_ms"]["n"] == 3
        assert entry["wall_mean_ms"] == entry["stats"]["wall_mean_ms"]["median"]
    assert not drifting["stats"]["stable"]
    assert "trials spread" in drifting["stats"]["unstable_reason"]
    assert drifting["stats"]["wall_mean_ms"]["spread"] > 0.6
    assert steady["stats"]["stable"], steady["stats"]["unstable_reason"]
    # One process: the interval can only come from its trials, and says so.
    assert "between the trials of one process" in analyse_run({"results": [result]})["results"][0][
        "backends"]["steady"]["stats"]["ci_method"]


def test_trials_are_interleaved_across_backends_in_an_order_that_turns(monkeypatch):
    """Trial 1 of every backend, then trial 2: each round in the order trial_order gives, which
    every trial records (`position`), as a real job runs and records it."""
    order = []

    def recording(name):
        backend = stand_in(name, lambda n: 0.0)

        def prepare(problem):
            inner = backend.prepare(problem)
            return Prepared(fn=lambda: (order.append(name), inner.fn())[1])

        return Backend(name, name, backend.unavailable, prepare)

    monkeypatch.setitem(BACKENDS, "a", recording("a"))
    monkeypatch.setitem(BACKENDS, "b", recording("b"))
    config = tiny_config(backends=["a", "b"])
    config["cpu"].update(warmup=0, iters=1, trials=2)
    raw = run_job(job_spec(config, "tuned", SHAPE), None, "test", process=1)
    # First calls (set-up, in the configured order), then process 1's rounds (the job's third and
    # fourth): the rotation that starts at b, forwards, then backwards.
    assert order == ["a", "b", "b", "a", "a", "b"]
    positions = {n: [(t["process"], t["index"], t["position"]) for t in raw["backends"][n]["trials"]] for n in "ab"}
    assert positions == {"a": [(1, 0, 1), (1, 1, 0)], "b": [(1, 0, 0), (1, 1, 1)]}
    jsonschema.Draft202012Validator(result_schema()).validate(analyse_result(raw))


def test_the_round_order_puts_each_pair_each_way_and_every_backend_in_every_place():
    """Over the job's rounds (processes x trials, counted on across processes) any two backends
    run as often in one order as in the other (within one of it), and each backend takes each place
    in the round; with two backends each process of an even number of trials is balanced by itself."""
    names = ["native", "ck", "triton", "sdpa", "fa4"]
    for processes, trials in ((2, 3), (2, 2), (1, 10), (3, 5)):
        rounds = [trial_order(names, p, i, trials) for p in range(processes) for i in range(trials)]
        assert all(sorted(r) == sorted(names) for r in rounds)
        for x in names:
            for y in names:
                if x < y:
                    first = sum(r.index(x) < r.index(y) for r in rounds)
                    assert abs(2 * first - len(rounds)) <= 1, (x, y, rounds)
    places = [trial_order(names, 0, i, 10) for i in range(10)]
    assert all({r[k] for r in places} == set(names) for k in range(len(names)))
    assert [trial_order(["a", "b"], p, i, 2) for p in range(2) for i in range(2)] == [
        ["a", "b"], ["b", "a"], ["b", "a"], ["a", "b"]]


def test_the_schema_rejects_an_ok_backend_without_trials(tmp_path):
    config = tiny_config(backends=["native", "ck"])
    result = analyse_result(run_job(job_spec(config, "tuned", SHAPE), None, "test"))
    validator = jsonschema.Draft202012Validator(result_schema())
    validator.validate(result)
    stripped = copy.deepcopy(result)
    stripped["backends"]["native"]["trials"] = []
    assert any("should be non-empty" in e.message or "is too short" in e.message
               for e in validator.iter_errors(stripped))
    stripped["backends"]["native"].pop("trials")
    assert any("'trials' is a required property" in e.message for e in validator.iter_errors(stripped))
    path = tmp_path / "r.json"
    path.write_text(json.dumps(stripped))
    with pytest.raises(ResultError, match="trials"):
        collect([path])


def _limit_memory(limit_bytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.parametrize("shape, stage", [
    # inputs of a few MB, but the fp32 reference's (1, 2, 32768, 32768) scores need 8 GiB
    ({"batch": 1, "seq": 32768, "heads": 2, "head_dim": 16}, "fp32 reference"),
    # the inputs themselves: a 4 GiB fp32 draw before the fp16 cast
    ({"batch": 256, "seq": 16384, "heads": 16, "head_dim": 16}, "inputs"),
])
def test_a_job_whose_reference_does_not_fit_still_writes_its_result(tmp_path, shape, stage):
    config = tiny_config(backends=["native", "sdpa", "ck"])
    spec = job_spec(config, "tuned", shape)
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "fabench.measure", "--spec", spec.to_json(), "--out", str(out),
           "--project-commit", "abc123", "--process", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=_limit_memory(3 * 1024**3))  # the runner and torch fit, 8 GiB does not
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    reference = result["reference"]
    assert reference["status"] == "failed" and reference["failure_kind"] == "oom", reference
    assert reference["reason"].startswith(f"the {stage} could not be made: out of memory")
    for name in ("native", "sdpa"):
        entry = result["backends"][name]
        assert entry["status"] == "failed" and entry["failure_kind"] == "oom"
        assert entry["reason"].startswith(f"not measured: the {stage} could not be made: out of memory")
        assert entry["trials"] == [] and entry["stats"] is None
    assert result["backends"]["ck"]["status"] == "unavailable"  # could not have run here anyway
    assert collect([out])["results"][0]["reference"]["status"] == "failed"  # a valid result


def test_a_cpu_job_places_no_local_memory_and_the_merge_keeps_each_backends_reason(monkeypatch):
    """On a CPU the method records no local-memory setting (it moves no CPU time, and CPU runs of
    either setting stay one experiment); a GPU process that could not place a backend's local
    memory anew says why, and the job's merged method keeps that reason whichever process said it.
    Blind side: no GPU here; the GPU test (test_gpu_backends) checks that a trial asks for it."""
    from fabench.results.merge import merge

    monkeypatch.setitem(BACKENDS, "steady", stand_in("steady", lambda n: 1.0))
    config = tiny_config(backends=["steady"])
    config["cpu"].update(warmup=1, iters=2, trials=2)
    first, second = (run_job(job_spec(config, "tuned", SHAPE), None, "test", process) for process in (0, 1))
    assert first["method"]["local_memory"] is None and first["method"]["local_memory_kept"] == {}
    second["method"]["local_memory_kept"] = {"steady": "not done on ROCm: no binding"}
    exits = [{"index": i, "exit_code": 0, "wrote_result": True} for i in (0, 1)]
    merged = merge([first, second], exits)
    assert merged["method"]["local_memory_kept"] == {"steady": "not done on ROCm: no binding"}
    jsonschema.validate(merged, result_schema())
