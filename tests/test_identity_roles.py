"""The experiment's identity by declaration: every field of a result's method is marked in the
result schema as a setting (changes what is measured) or a description, and the identity is the
settings. A field the measuring code writes without a mark fails here, so it gets decided."""

from __future__ import annotations

import json
import tarfile

import pytest

from fabench import config as fabench_config
from fabench.analysis import identity
from fabench.measure.device.gpu_state import GpuState
from fabench.measure.job import _method, measurement
from fabench.measure.spec import job_spec
from support.shared_runs import h100_archive
from test_plan import with_defaults
from workflow_util import REPO, default_config

ROLES = (identity.SETTING, identity.DESCRIPTION, identity.HOST_SETTING)


def written_method(platform: str) -> dict:
    """The method the measuring code writes for a job of the default config on `platform`."""
    config = with_defaults(default_config())
    spec = job_spec(config, next(iter(config["variants"])), config["shapes"][0], platform=platform)
    return _method(measurement(spec.settings, platform, spec.shape), GpuState(platform), {}, {})


@pytest.mark.parametrize("platform", ["cpu", "cuda", "rocm"])
def test_every_method_field_the_measuring_code_writes_is_declared(platform):
    undeclared = sorted(set(written_method(platform)) - set(identity.method_roles()))
    assert undeclared == [], f"mark these in result.schema.json's method with x-fabench-role: {undeclared}"


def test_every_declared_field_is_a_setting_or_a_description():
    roles = identity.method_roles()
    assert roles and {name: role for name, role in roles.items() if role not in ROLES} == {}


def test_every_method_field_of_the_committed_runs_is_declared():
    found = {key for path in REPO.glob("examples/*/archive/*/*/results.json")
             for result in json.loads(path.read_text())["results"] for key in result["method"]}
    assert found and sorted(found - set(identity.method_roles())) == []


def test_a_description_is_no_setting_and_an_undeclared_field_counts_as_one():
    roles = identity.method_roles()
    description = next(name for name, role in roles.items() if role == identity.DESCRIPTION)
    setting = next(name for name, role in roles.items() if role == identity.SETTING)
    base = {"variant": "v", "shape_id": "s", "method": {setting: 1, description: "a"}}
    reworded = {**base, "method": {setting: 1, description: "b"}}
    changed = {**base, "method": {setting: 2, description: "a"}}
    unknown = {**base, "method": {setting: 1, description: "a", "not_declared_anywhere": 1}}
    assert identity.experiment_differences([base], [reworded]) == []
    assert identity.experiment_differences([base], [changed]) == [f"method.{setting}: 1 -> 2"]
    assert identity.experiment_differences([base], [unknown]) == ["method.not_declared_anywhere: absent -> 1"]


def test_host_threads_are_a_setting_of_a_cpu_run_only():
    """torch's threads move a CPU run's times and no GPU kernel's device time: two GPU runs of 32 and
    of 1 thread are one experiment (a one-card run of 32 and a two-card run of 1 were judged apart
    before), two CPU runs are not."""
    roles = identity.method_roles()
    assert roles["cpu_threads"] == identity.HOST_SETTING
    def run(platform, threads):
        return [{"variant": "v", "shape_id": "s", "platform": platform, "method": {"cpu_threads": threads}}]
    assert identity.experiment_differences(run("cuda", 32), run("cuda", 1)) == []
    assert identity.experiment_differences(run("rocm", 32), run("rocm", 1)) == []
    assert identity.experiment_differences(run("cpu", 2), run("cpu", 1)) == ["method.cpu_threads: 2 -> 1"]


def test_the_newest_h100_run_differs_from_the_earlier_ones_in_settings_only(tmp_path):
    """examples/h100's run took the kernels' own time with nvbench's stopping rule; the 2026-11-25
    runs took event time in fixed trials. Those are other quantities and other trials (settings);
    the words for the per-call period beside them (method.period) are not."""
    with tarfile.open(REPO / "examples" / "h100" / "archive-0001.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    newest = json.loads(next(tmp_path.glob("archive/*/*/results.json")).read_text())["results"]
    earlier = json.loads(next(h100_archive().glob("*/*/results.json")).read_text())["results"]
    differences = [line.split(":")[0] for line in identity.experiment_differences(earlier, newest)]
    assert differences == ["method.device_figure", "method.stopping"]
