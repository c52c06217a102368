"""Bad input gets one clear error, naming the key, before any job starts.

The checks run in-process through fabench.workflow_config.check_config, the function the Snakefile's plan calls; two
tests run snakemake itself to prove the wiring (one line, no job scheduled, no results folder).
"""

import json
import os
import re
import shlex

import pytest
import yaml

from fabench.container.recipe import dockerfile_arg_defaults

from fabench.config import ConfigError, check_roles
from fabench.workflow_config import check_config
from fabench.measure.backends.registry import BACKENDS
from workflow_util import REPO, default_config, planned_jobs, snakemake

SCHEMAS = REPO / "workflow" / "schemas"


def _mutated(mutate):
    config = default_config()
    mutate(config)
    return config


def _set(path: str, value):
    """A mutation setting a dotted key ("shapes.0.batch") to `value`."""
    def mutate(config):
        *parents, last = path.split(".")
        node = config
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    return mutate


BAD_CONFIGS = {
    "wrong type": (_set("warmup", "ten"), "warmup: 'ten' is not of type 'integer'"),
    "unknown key": (lambda c: c.update(warmups=3), "'warmups' was unexpected"),
    "bad value": (_set("dtype", "float8"), "dtype: 'float8' is not one of"),
    "unknown aiter key": (lambda c: c["variants"]["tuned"]["triton"].update(BLOCK_K=4),
                          "variants.tuned.triton: Additional properties are not allowed ('BLOCK_K' was unexpected)"),
    "block size": (_set("variants.tuned.triton.BLOCK_M", 48), "variants.tuned.triton.BLOCK_M"),
    "zero seq": (_set("shapes.1.seq", 0), "shapes.1.seq: 0 is less than the minimum of 1"),
    "missing key": (lambda c: c.pop("tolerance"), "'tolerance' is a required property"),
    "unknown backend": (_set("backends", ["native", "xformers"]), "backends.1: 'xformers' is not one of"),
    "unknown role backend": (_set("roles.cuda.vendor", "cudnn"), "roles.cuda.vendor: 'cudnn' is not one of"),
    "role not measured": (_set("backends", ["native", "sdpa", "flex", "ck", "triton"]),
                          "roles.cuda.vendor: 'sdpa_cudnn' is not in backends (native, sdpa, flex, ck, triton)"),
    "duplicate shape": (lambda c: c["shapes"].append(dict(c["shapes"][0])),
                        "shapes: lists b4-s512-h8-d256 twice"),
    "duplicate backend": (lambda c: c["backends"].append("native"), "backends: lists \"native\" twice"),
    "head_dim": (_set("shapes.0.head_dim", 60), "shapes.0.head_dim: 60 is not a multiple of 8"),
    "bad run name": (_set("run", "../elsewhere"), "run: '../elsewhere' does not match"),
    "bad runtime": (_set("runtime", "podman"), "runtime: 'podman' is not one of"),
    "integral float shape": (_set("shapes.0.batch", 2.0), "shapes.0.batch: 2.0 is not of type 'integer'"),
    "integral float iters": (_set("cpu.iters", 2.0), "cpu.iters: 2.0 is not of type 'integer'"),
    "boolean iters": (_set("iters", True), "iters: True is not of type 'integer'"),
    "no variants": (_set("variants", {}), "variants: {} should be non-empty"),
    "published missing": (_set("published", "null"), "published: no file at"),
    "published not yaml": (_set("published", "README.md"), "is not YAML"),
    "published wrong shape": (_set("published", "config.yaml"), "published: "),
    "published whole text": (_set("published", "README.md"), "line 5, column 1: could not find expected ':'"),
    "run name with a newline": (_set("run", "x\n"), "run: 'x\\n' does not match"),
    "variant name with a newline": (lambda c: c["variants"].update({"mine\n": {"triton": {}}}),
                                    "variants: the name 'mine\\n' does not match"),
    "platform label with a newline": (_set("platforms", {"rocm64\n": {}}), "platforms: the name 'rocm64\\n'"),
    "archive label with a newline": (_set("archive", {"label": "rocm\n"}), "archive.label: 'rocm\\n' does not"),
    "image name with a newline": (_set("image", {"name": "fabench\n"}), "image.name: 'fabench\\n' does not"),
    "title of two lines": (_set("variants.tuned.title", "After\nTuning"), "variants.tuned.title: 'After\\nTuning'"),
    "run name too long": (_set("run", "r" * 300), "run: 'rrrrrrrrrr"),
    "variant name too long": (lambda c: c["variants"].update({"v" * 120: {"triton": {}}}),
                              "variants: the name 'vvvv"),
    "platform label too long": (_set("platforms", {"p" * 120: {}}), "(120 characters) is too long"),
    "build arg beside build_args": (_set("platforms", {"rocm64": {"BASE_IMAGE": "rocm/pytorch:x"}}),
                                    "build arguments such as BASE_IMAGE go under platforms.rocm64.build_args"),
    "image setting under image:": (_set("platforms", {"rocm64": {"image": {"name": "x"}}}),
                                   "platforms.rocm64: Additional properties are not allowed ('image' was unexpected)"),
    "build arg under image": (_set("image", {"AITER_COMMIT": "abc"}), "go under image.build_args"),
    "misspelt block": (lambda c: c.update(platform={}), "did you mean 'platforms' instead of 'platform'?"),
    "misspelt key": (_set("timing.trails", 3), "did you mean 'trials' instead of 'trails'?"),
    # a config file's dotted key (Snakemake's own --config refuses a dotted key before the workflow reads it)
    "dotted key": (lambda c: c.update({"timing.trials": 3}), "a key of a block is written nested, not dotted: "
                   "timing: {trials: ...} in a config file, or --config 'timing={trials: ...}'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_named_in_one_line(case):
    mutate, expected = BAD_CONFIGS[case]
    message = _error(mutate)
    assert "\n" not in message
    assert expected in message


def test_a_long_value_is_quoted_by_its_start_only():
    message = _error(_set("run", "r" * 5000))
    assert len(message) < 300 and "(5000 characters) is too long" in message


def _error(mutate, platform: str = "cuda") -> str:
    """The one line that stops `mutate`d config.yaml, its jobs planned for `platform`."""
    config = _mutated(mutate)
    with pytest.raises(ConfigError) as err:
        check_config(config, REPO, SCHEMAS)
        check_roles(config, platform)
    return str(err.value)


@pytest.mark.parametrize("content, expected", [
    (b"\x00\x01\xff\xfe binary", "is not a text file"),
    (b"- 1\n- 2\n", "(top level): [1, 2] is not of type 'object'"),
    pytest.param(("word " * 2000).encode(), "(9999 characters) is not of type 'object'", id="long text"),
    (b"source: [unclosed\n", "is not YAML: line 2, column 1: expected ',' or ']'"),
])
def test_a_published_file_that_is_binary_or_of_another_shape_is_named_in_one_line(tmp_path, content, expected):
    (tmp_path / "numbers.yaml").write_bytes(content)
    message = _error(_set("published", str(tmp_path / "numbers.yaml")))
    assert message.startswith(f"published: {tmp_path / 'numbers.yaml'}")
    assert expected in message and "\n" not in message and len(message) < 400, message


def test_published_roles_must_name_a_labelled_backend(tmp_path):
    numbers = yaml.safe_load((REPO / "report/published/mi300x-2025-12-30.yaml").read_text())
    numbers["roles"]["vendor"] = "cudnn"
    (tmp_path / "numbers.yaml").write_text(yaml.safe_dump(numbers, sort_keys=False))
    assert "roles.vendor: 'cudnn' has no entry in labels (native, ck, triton)" in \
        _error(_set("published", str(tmp_path / "numbers.yaml")))


@pytest.mark.parametrize("where, build_args, expected", [
    ("platforms", {"rocm64": {"build_args": {"BASE_IMG": "rocm/pytorch:x"}}},
     "platforms.rocm64.build_args.BASE_IMG: {dockerfile} declares no ARG BASE_IMG, so the build would ignore it "
     "(it declares {declared}); did you mean 'BASE_IMAGE'?"),
    ("image", {"build_args": {"GPU_ARCH": "gfx950"}}, "image.build_args.GPU_ARCH: {dockerfile} declares no ARG"),
    ("platforms", {"rocm64": {"dockerfile": "Dockerfile.rocm"}}, "platforms.rocm64.dockerfile: no Dockerfile at"),
])
def test_a_build_argument_the_dockerfile_ignores_is_named(tmp_path, where, build_args, expected):
    """A docker run (platforms need one) checks each image's build arguments against its Dockerfile."""
    config = {**default_config(), where: build_args, "runtime": "docker"}
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("invalid config:")]
    declared = ", ".join(sorted(dockerfile_arg_defaults(REPO / "Dockerfile")))  # the Dockerfile's own ARGs
    assert lines == [lines[0]] and expected.format(dockerfile=REPO / "Dockerfile", declared=declared) in lines[0], lines


def test_proxy_build_arguments_need_no_arg_line(tmp_path):
    config = {**default_config(), "platforms": {"a": {"build_args": {"https_proxy": "http://proxy:3128"}}}}
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_the_default_config_passes():
    check_config(default_config(), REPO, SCHEMAS)


def test_a_published_file_of_another_shape_names_what_is_missing(tmp_path):
    (tmp_path / "numbers.yaml").write_text(yaml.safe_dump({"source": {"title": "x"}}))
    with pytest.raises(ConfigError, match=r"published: .*numbers.yaml: \(top level\): 'method' is a required"):
        check_config(_mutated(_set("published", str(tmp_path / "numbers.yaml"))), REPO, SCHEMAS)


def test_the_schema_lists_exactly_the_registered_backends():
    schema = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    assert schema["definitions"]["backend"]["enum"] == list(BACKENDS)


def test_snakemake_stops_before_any_job_with_the_one_line(tmp_path):
    proc = snakemake(tmp_path, "-n", "report", config=_mutated(_set("shapes.0.batch", 2.0)), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("invalid config:")]
    assert errors == ["invalid config: shapes.0.batch: 2.0 is not of type 'integer' (expected type integer and minimum 1)"], output
    assert "rule write_report" not in output and "rule measure" not in output  # nothing was scheduled
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("platform, repeats", [("cpu", ("cpu", "repeats")), ("cuda", ("timing", "repeats")),
                                               ("rocm", ("timing", "repeats"))])
def test_default_config_plans_exactly_its_platforms_processes(tmp_path, platform, repeats):
    """A job has as many measuring processes as its platform uses: no process that does nothing."""
    proc = snakemake(tmp_path, "-n", "report", timeout=120, env={"FABENCH_PLATFORM": platform})
    assert proc.returncode == 0, proc.stderr
    counts = planned_jobs(proc)
    assert counts["write_report"] == 1
    block, key = repeats
    assert counts["measure"] == 10 * default_config()[block][key]


def test_this_hosts_platform_is_planned_without_being_told(tmp_path):
    """This test host is a CPU (no GPU device nodes, or a CPU build of torch): cpu.repeats processes."""
    from fabench.planned_platform import planned_platform

    assert "FABENCH_PLATFORM" not in os.environ and planned_platform(docker=False) == "cpu"
    proc = snakemake(tmp_path, "-n", "report", timeout=120)
    assert planned_jobs(proc)["measure"] == 10 * default_config()["cpu"]["repeats"]


def test_a_platform_that_is_none_is_named(tmp_path):
    proc = snakemake(tmp_path, "-n", "report", timeout=120, env={"FABENCH_PLATFORM": "tpu"})
    assert proc.returncode != 0
    assert "FABENCH_PLATFORM: 'tpu' is not a platform (expected one of rocm, cuda, cpu)" in proc.stdout + proc.stderr


def planned_spec(proc) -> dict:
    """The job spec of the first measuring job of a dry run with -p."""
    command = next(line for line in proc.stdout.splitlines() if " --spec " in line)
    return json.loads(shlex.split(command.split(" --spec ", 1)[1])[0])


def test_a_user_file_sets_one_key_of_a_block_and_keeps_the_others(tmp_path):
    mine = {"cpu": {"leave_out": []}, "timing": {"trials": 5}, "roles": {"cpu": {"vendor": "native"}},
            "image": {"build_args": {"GPU_ARCHS": "gfx950"}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(mine))
    # Planned for a GPU: a CPU job's spec holds the cpu block's counts in place of timing's.
    proc = snakemake(tmp_path, "-n", "-p", "report", "--configfile", str(tmp_path / "mine.yaml"), timeout=120,
                     env={"FABENCH_PLATFORM": "cuda"})
    assert proc.returncode == 0, proc.stderr
    settings = planned_spec(proc)["settings"]
    defaults = default_config()
    assert settings["cpu"] == {**settings["cpu"], **defaults["cpu"], "leave_out": []}
    assert settings["timing"]["trials"] == 5 and settings["timing"]["repeats"] == defaults["timing"]["repeats"]
    assert settings["roles"]["cpu"] == {**defaults["roles"]["cpu"], "vendor": "native"}
    assert settings["roles"]["rocm"] == defaults["roles"]["rocm"]


def test_nested_config_values_merge_into_their_block_typed_as_in_a_file(tmp_path):
    proc = snakemake(tmp_path, "-n", "-p", "report", "--config", "timing={repeats: 3, clear_l2: false}",
                     "run=123", timeout=120, env={"FABENCH_PLATFORM": "cuda"})
    assert proc.returncode == 0, proc.stderr
    assert planned_jobs(proc)["measure"] == 10 * 3
    spec = planned_spec(proc)
    assert spec["run"] == "123" and "results/123/report.md" in proc.stdout
    assert spec["settings"]["timing"]["repeats"] == 3 and spec["settings"]["timing"]["clear_l2"] is False
    assert spec["settings"]["timing"]["trials"] == default_config()["timing"]["trials"]


def test_a_run_name_of_digits_keeps_its_text(tmp_path):
    proc = snakemake(tmp_path, "-n", "report", "--config", "run=007", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "results/007/report.md" in proc.stdout


def test_variants_given_with_config_replace_the_defaults(tmp_path):
    proc = snakemake(tmp_path, "-n", "report", "--config", "variants={mine: {triton: {BLOCK_M: 64}}}", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {line.split("/")[2] for line in proc.stdout.split()
            if re.fullmatch(r"results/local/[^/]+/b\d+-s\d+-h\d+-d\d+\.json,?", line)} == {"mine"}


def test_roles_are_needed_for_the_planned_platform_only(tmp_path):
    """backends without cuDNN: a CPU run does not check the CUDA roles; a CUDA run is told its
    vendor role is not measured, and how the platform was found."""
    config = {**default_config(), "backends": ["native", "sdpa", "flex"]}
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120, env={"FABENCH_PLATFORM": "cpu"})
    assert proc.returncode == 0, proc.stderr
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120, env={"FABENCH_PLATFORM": "cuda"})
    assert proc.returncode != 0
    line = next(line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("invalid config:"))
    assert line.startswith("invalid config: roles.cuda.vendor: 'sdpa_cudnn' is not in backends (native, sdpa, "
                           "flex)"), line
    assert line.endswith("FABENCH_PLATFORM=rocm, cuda or cpu names another"), line


def test_a_config_without_the_roles_of_its_platform_is_named(tmp_path):
    """A config of a CUDA user that gives the CUDA roles only (Snakemake's --replace-workflow-config
    leaves config.yaml out): a CUDA run is planned, a CPU run is told what is missing."""
    config = {**default_config(), "roles": {"cuda": default_config()["roles"]["cuda"]}}
    args = ("-n", "report", "--replace-workflow-config")
    assert snakemake(tmp_path, *args, config=config, timeout=120, env={"FABENCH_PLATFORM": "cuda"}).returncode == 0
    proc = snakemake(tmp_path, *args, config=config, timeout=120, env={"FABENCH_PLATFORM": "cpu"})
    assert "invalid config: roles.cpu: the jobs run on cpu, and the config gives no baseline/vendor/triton roles " \
           "for it (expected roles.cpu: {baseline: ..., vendor: ..., triton: ...})" in proc.stdout + proc.stderr
