"""The side doors check as the front door does (issue 40, class 1): a job spec or a sweep job spec
written by hand (`python -m fabench.measure --spec`, a measuring worker's request,
`python -m fabench.tune --spec`) is refused value by value exactly where the config it would come
from is refused, with the config schema's own bounds, in one line naming the spec's key; the
measuring command's own options are bounded as the config keys they stand for.

Blind side: inside the benchmark image (FABENCH_RUNTIME=docker) only the types are read there; the
container launcher's check on the host is run by tests/test_container.py's docker tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from snakemake.utils import validate

from fabench.config import SpecError
from fabench.measure.invocation import USAGE
from fabench.measure.launch import runner
from fabench.measure.launch.worker_client import MARK, Address
from fabench.measure.spec import RUNTIME_ENV, JobSpec, job_settings, job_spec
from fabench.measure.sweep_spec import SweepSpec
from fabench.tune.settings import sweep_job_spec
from test_config_bounds import BOUNDS
from workflow_util import REPO, tiny_config

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}
SWEEP = {"strategy": "exhaustive", "space": {"BLOCK_M": [64]}, "objective": "geomean", "reference": "tuned"}


def validated() -> dict:
    config = tiny_config(sweep=dict(SWEEP))
    validate(config, str(SCHEMA), set_default=True)
    return config


def job_value() -> dict:
    return json.loads(job_spec(validated(), "tuned", SHAPE).to_json())


def sweep_value() -> dict:
    config = validated()
    return json.loads(json.dumps(sweep_job_spec(config, job_settings(config), "sweep", SHAPE)))


def spec_place(key: str) -> tuple[str, str] | None:
    """(spec kind, the key's place in that spec) for a config key a spec holds; None for the others."""
    head = key.split(".")[0]
    if key.startswith("variants.tuned.triton."):
        return "job", key.replace("variants.tuned.", "", 1)
    if head == "sweep":
        return "sweep", key
    if head in job_value()["settings"]:
        return "job", f"settings.{key}"
    return None


def set_at(value: dict, dotted: str, new) -> dict:
    node = value
    *parents, last = dotted.split(".")
    for part in parents:
        node = node[part]
    node[last] = new
    return value


SPEC_BOUNDS = {key: spec_place(key) for key in BOUNDS if spec_place(key)}


def test_every_bounded_key_a_spec_holds_is_tried():
    """The keys below are the config's bounded keys that reach a spec: a bound added to the config
    for such a key is tried here too (the others are the measuring command's options or no spec's)."""
    assert {key for key in BOUNDS if spec_place(key) is None} == {"measure.job_timeout_s", "measure.worker_idle_s"}
    assert len(SPEC_BOUNDS) == len(BOUNDS) - 2


@pytest.mark.parametrize("key", sorted(SPEC_BOUNDS))
def test_a_spec_is_refused_where_its_config_is_and_only_there(key):
    kind, place = SPEC_BOUNDS[key]
    cls, value = (JobSpec, job_value) if kind == "job" else (SweepSpec, sweep_value)
    inside, beyond = BOUNDS[key]
    cls.from_json(json.dumps(set_at(value(), place, inside)))  # the bound itself is taken
    with pytest.raises(SpecError) as caught:
        cls.from_json(json.dumps(set_at(value(), place, beyond)))
    message = str(caught.value)
    assert message.startswith(f"{place}: ") and "maximum" in message and "\n" not in message, message


@pytest.mark.parametrize("place, bad, expected", [
    ("settings.backends", ["native", "fa9"], "settings.backends.1: 'fa9' is not one of"),
    ("settings.roles.cpu.vendor", "fa9", "settings.roles.cpu.vendor: 'fa9' is not one of"),
    ("run", "../elsewhere", "run: '../elsewhere' does not match"),
    ("variant", "a/b", "variant: the name 'a/b' does not match"),
    ("triton.BLOCK_M", 48, "triton.BLOCK_M: 48 is not one of"),
    ("settings.tolerance.min_cosine", 2.0, "settings.tolerance.min_cosine: 2.0 is greater than the maximum"),
    ("settings.timing.max_noise", 0, "settings.timing.max_noise: 0 is less than or equal to the minimum"),
    ("settings.backends", [], "settings.backends: [] should be non-empty"),
    ("shared_from", "../default", "shared_from: the name '../default' does not match"),
])
def test_a_value_the_config_refuses_is_one_line_naming_the_specs_key(place, bad, expected):
    """An unknown backend among them: once a KeyError traceback inside the measuring process."""
    with pytest.raises(SpecError) as caught:
        JobSpec.from_json(json.dumps(set_at(job_value(), place, bad)))
    assert str(caught.value).startswith(expected) and "\n" not in str(caught.value), str(caught.value)


def test_a_sweep_spec_holds_typed_values_and_names_a_bad_one():
    spec = SweepSpec.from_json(json.dumps(sweep_value()))
    assert spec.sweep.space == {"BLOCK_M": (64,)} and spec.settings.seed == validated()["seed"]
    for place, bad, expected in [("stage", "polish", "stage: 'polish' is not one of sweep, coarse, refine"),
                                 ("sweep.space.BLOCK_M", [64, "x"], "sweep.space.BLOCK_M.1: 'x' is not"),
                                 ("reference_triton.num_warps", 3, "reference_triton.num_warps: 3 is not one of"),
                                 ("sweep.space.BLOCK_Q", [64], "sweep.space: Additional properties")]:
        with pytest.raises(SpecError) as caught:
            SweepSpec.from_json(json.dumps(set_at(sweep_value(), place, bad)))
        assert str(caught.value).startswith(expected), str(caught.value)


def test_in_the_image_the_types_alone_are_read(monkeypatch):
    """The container launcher read the values on the host (the image has no PyYAML, no jsonschema)."""
    text = json.dumps(set_at(job_value(), "settings.seed", 2**32))
    monkeypatch.setenv(RUNTIME_ENV, "docker")
    assert JobSpec.from_json(text).settings.seed == 2**32
    monkeypatch.delenv(RUNTIME_ENV)
    with pytest.raises(SpecError, match=r"^settings.seed: 4294967296 is greater than the maximum"):
        JobSpec.from_json(text)


def runner_refusal(capsys, *options: str, spec: dict | None = None) -> str:
    argv = ["--spec", json.dumps(spec or job_value()), "--out", "out.json", *options]
    with pytest.raises(SystemExit) as ended:
        runner.parse_args(argv)
    err = capsys.readouterr().err
    assert ended.value.code == USAGE and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("options, expected", [
    (("--process", "-1"), "argument --process: -1 is not a process of a job (expected 0 or more)"),
    (("--process", "100"), "argument --process: 100 is not a process of a job (expected 0 to 99"),
    (("--process", "0", "--timeout-s", "1e10"), "argument --timeout-s: 10000000000.0 is greater than the maximum "
                                                 "of 604800"),
    (("--process", "0", "--timeout-s", "nan"), "argument --timeout-s: nan is not a finite number"),
    (("--process", "0", "--worker-idle-s", "0"), "argument --worker-idle-s: 0.0 is less than or equal to the "
                                                  "minimum of 0"),
])
def test_the_measuring_commands_options_are_bounded_as_the_config_keys_they_stand_for(capsys, options, expected):
    assert expected in runner_refusal(capsys, *options)


@pytest.mark.parametrize("mode", ["isolate", "worker"])
def test_a_seed_beyond_the_generators_is_refused_with_why_in_either_mode(capsys, mode):
    """Isolate mode once measured it (torch takes 2**64-1), worker mode died on numpy's seed."""
    line = runner_refusal(capsys, "--process", "0", "--mode", mode,
                          spec=set_at(job_value(), "settings.seed", 2**32))
    assert line.startswith("python -m fabench.measure: error: argument --spec: settings.seed: 4294967296 is "
                           "greater than the maximum of 4294967295"), line


def test_a_worker_handed_a_bad_spec_answers_one_line_and_serves_on(tmp_path):
    """A request the runner would have refused, sent to the worker's socket: the job ends with the
    usage exit code and the reason, and the worker is still there for the next one."""
    from fabench.measure.launch.worker import Worker

    worker = Worker(Address("w", tmp_path), {}, idle_s=60)
    request = {"spec": json.dumps(set_at(job_value(), "settings.seed", 2**32)), "sent_at": 0.0, "process": 0,
               "out": str(tmp_path / "out.json")}
    ours, theirs = socket.socketpair()
    with ours, theirs:
        socket.send_fds(ours, [b"F"], [])  # as the client hands over (no lease here)
        ours.sendall(json.dumps(request).encode() + b"\n")
        assert worker.handle(theirs) is True
        theirs.close()
        answer = ours.makefile("rb").read().decode()
    lines = [line for line in answer.replace(MARK.decode(), "\n").splitlines() if line]
    assert lines[1].startswith("python -m fabench.measure: error: settings.seed: 4294967296 is greater")
    assert json.loads(lines[-1]) == {"exit_code": USAGE} and not (tmp_path / "out.json").exists()


def test_the_sweep_command_reads_its_spec_as_the_benchmarks(tmp_path):
    reference = tmp_path / "tuned.json"
    reference.write_text("{}")
    spec = json.dumps(set_at(sweep_value(), "sweep.keep", 0))
    proc = subprocess.run([sys.executable, "-m", "fabench.tune", "--spec", spec, "--aiter-config", str(reference),
                           "--out", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == USAGE and proc.stderr.strip() == (
        "python -m fabench.tune: error: argument --spec: sweep.keep: 0 is less than the minimum of 1 "
        "(expected type integer and minimum 1 and maximum 1000)"), proc.stderr


def test_the_sweep_types_hold_exactly_the_keys_a_sweep_job_reads():
    import dataclasses

    import yaml

    from fabench.measure.sweep_spec import Sweep, SweepTiming
    from fabench.tune.settings import JOB_KEYS

    schema = yaml.safe_load(SCHEMA.read_text())["properties"]["sweep"]["properties"]
    assert [f.name for f in dataclasses.fields(Sweep)] == list(JOB_KEYS)
    assert {f.name for f in dataclasses.fields(SweepTiming)} == set(schema["timing"]["properties"])


def test_the_container_launcher_reads_the_jobs_arguments_on_the_host_first(tmp_path, capsys):
    """The image reads the types alone: its launcher refuses, before any container starts, what
    the command in it would refuse on a host (the docker tests run the container itself)."""
    from fabench.container.job import RUNNER_MODULE, SWEEP_MODULE, _check_in_host

    config = tmp_path / "tuned.json"
    config.write_text("{}")
    out = str(tmp_path / "process-0.json")
    _check_in_host(RUNNER_MODULE, ["--spec", json.dumps(job_value()), "--out", out, "--process", "0"], config)
    for module, spec, more in ((RUNNER_MODULE, set_at(job_value(), "settings.seed", 2**32), ["--process", "0"]),
                               (SWEEP_MODULE, set_at(sweep_value(), "sweep.keep", 0), [])):
        with pytest.raises(SystemExit) as ended:
            _check_in_host(module, ["--spec", json.dumps(spec), "--out", out, *more], config)
        err = capsys.readouterr().err
        assert ended.value.code == USAGE and err.count("\n") == 1 and "argument --spec: " in err, err
