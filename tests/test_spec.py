"""The measure stage's typed boundary (fabench.measure.spec): one JobSpec, written and read by one
pair of functions, each bad key named on one line; its types kept equal to the schema's keys."""

import dataclasses
import json

import pytest
import yaml
from snakemake.utils import validate

from fabench.config import SpecError
from fabench.measure.spec import COUNTS, JOB_SETTINGS_KEYS, Cpu, JobSpec, Settings, Timing, job_settings, job_spec
from fabench.measure.stopping import StopRule
from workflow_util import REPO, tiny_config

SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}


def validated() -> dict:
    config = tiny_config()
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    return config


def test_the_types_hold_exactly_the_schemas_keys():
    timing = {f.name for f in dataclasses.fields(Timing)}
    assert timing == set(SCHEMA["properties"]["timing"]["properties"]) | set(COUNTS)
    settings = {f.name for f in dataclasses.fields(Settings)} | set(COUNTS)
    assert settings == set(JOB_SETTINGS_KEYS)
    cpu = {f.name for f in dataclasses.fields(Cpu)}
    assert cpu == set(SCHEMA["properties"]["cpu"]["properties"])


def test_the_stopping_rule_is_read_from_the_timing_whatever_fields_it_gains():
    """StopRule.from_timing takes each of its configured fields from Timing: a field added to the rule
    must be a timing key (schema and Timing) or carry a default of its own (the convergence clause's
    constants, nvbench's), else this fails naming it."""
    configured = {f.name for f in dataclasses.fields(StopRule) if f.default is dataclasses.MISSING}
    assert configured <= {f.name for f in dataclasses.fields(Timing)}
    timing = job_spec(validated(), "tuned", SHAPE).settings.timing
    rule = StopRule.from_timing(timing)
    assert (rule.max_noise, rule.min_samples) == (timing.max_noise, timing.min_samples)


def test_a_spec_written_and_read_back_is_the_same_and_spelled_as_the_config():
    config = validated()
    spec = job_spec(config, "tuned", SHAPE, run="r", platform="cpu")
    text = spec.to_json()
    assert JobSpec.from_json(text) == spec and JobSpec.from_json(text).to_json() == text
    value = json.loads(text)
    # On a CPU the cpu block's counts stand in for the top-level ones and timing's of the same name.
    whole, cpu = job_settings(config), config["cpu"]
    counts = {key: cpu[key] for key in ("trials", "repeats", "min_trial_ms", "max_warmup_ms")}
    assert value["settings"] == json.loads(json.dumps({**whole, "warmup": cpu["warmup"], "iters": cpu["iters"],
                                                       "timing": {**whole["timing"], **counts}}))
    assert value["shape_id"] == "b1-s64-h2-d32" and value["platform"] == "cpu"


def test_on_a_cpu_the_cpu_counts_are_measured_with_and_said_to_be_reduced():
    config = validated()
    settings = job_spec(config, "tuned", SHAPE).settings
    cpu = settings.measurement("cpu", flops=1.0)
    assert cpu.timing.iters == config["cpu"]["iters"] and cpu.timing.repeats == config["cpu"]["repeats"]
    assert cpu.reduced is True
    gpu = settings.measurement("cuda", flops=1.0)
    assert gpu.timing == settings.timing and gpu.reduced is False


def _spec_json(**changes) -> dict:
    value = json.loads(job_spec(validated(), "tuned", SHAPE).to_json())
    for dotted, new in changes.items():
        *parents, last = dotted.split("__")
        node = value
        for part in parents:
            node = node[part]
        if new is KeyError:
            del node[last]
        else:
            node[last] = new
    return value


@pytest.mark.parametrize("changes, expected", [
    ({"settings__timing__max_noise": "0.02"}, "settings.timing.max_noise: '0.02' is not a finite number"),
    ({"settings__timing__trials": True}, "settings.timing.trials: True is not an integer"),
    ({"settings__timing__clear_l2": 1}, "settings.timing.clear_l2: 1 is not true or false"),
    ({"settings__timing__device_method": "fast"}, "settings.timing.device_method: 'fast' is not one of queued, graph"),
    ({"settings__timing__max_nosie": 0.02}, "settings.timing.max_nosie: unknown key"),
    ({"settings__timing__iters": 3}, "settings.timing.iters: unknown key (the count is settings.iters)"),
    ({"settings__iters": KeyError}, "settings: missing iters"),
    ({"settings__cpu__threads": "all"}, "settings.cpu.threads: 'all' is not an integer or null"),
    ({"settings__cpu__leave_out": "flex"}, "settings.cpu.leave_out: 'flex' is not a list"),
    ({"settings__roles__cpu__vendor": 3}, "settings.roles.cpu.vendor: 3 is not a string"),
    ({"settings__dtype": "float64"}, "settings.dtype: 'float64' is not one of float16, bfloat16"),
    ({"shape_id": "b9-s1-h1-d8"}, "shape_id: 'b9-s1-h1-d8' is not the shape's (b1-s64-h2-d32)"),
    ({"platform": "xpu"}, "platform: 'xpu' is not one of rocm, cuda, cpu or null"),
])
def test_a_bad_key_is_one_line_naming_it(changes, expected):
    with pytest.raises(SpecError) as caught:
        JobSpec.from_dict(_spec_json(**changes))
    assert str(caught.value).startswith(expected), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_number_beyond_json_is_refused():
    value = _spec_json()
    value["settings"]["timing"]["max_trial_ms"] = float("inf")
    with pytest.raises(SpecError, match="settings.timing.max_trial_ms: inf is not a finite number"):
        JobSpec.from_dict(value)
