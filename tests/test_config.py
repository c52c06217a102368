"""Bad input gets one clear error, naming the key, before any job starts."""

import pytest

from workflow_util import default_config, snakemake


def _mutated(mutate):
    config = default_config()
    mutate(config)
    return config


BAD_CONFIGS = {
    "wrong type": (lambda c: c.update(warmup="ten"), "warmup: 'ten' is not of type 'integer'"),
    "unknown key": (lambda c: c.update(warmups=3), "'warmups' was unexpected"),
    "bad value": (lambda c: c.update(dtype="float8"), "dtype: 'float8' is not one of"),
    "unknown aiter key": (lambda c: c["variants"]["tuned"]["triton"].update(BLOCK_K=4),
                          "variants.tuned.triton: Additional properties are not allowed ('BLOCK_K' was unexpected)"),
    "block size": (lambda c: c["variants"]["tuned"]["triton"].update(BLOCK_M=48), "variants.tuned.triton.BLOCK_M"),
    "zero seq": (lambda c: c["shapes"][1].update(seq=0), "shapes.1.seq: 0 is less than the minimum of 1"),
    "missing key": (lambda c: c.pop("tolerance"), "'tolerance' is a required property"),
    "unknown backend": (lambda c: c.update(backends=["native", "xformers"]), "backends.1: 'xformers' is not one of"),
    "unknown role backend": (lambda c: c["roles"]["cuda"].update(vendor="cudnn"), "roles.cuda.vendor: 'cudnn' is not one of"),
    "duplicate shape": (lambda c: c["shapes"].append(dict(c["shapes"][0])), "shapes: listed twice: b4-s512-h8-d256"),
    "bad run name": (lambda c: c.update(run="../elsewhere"), "run: '../elsewhere' does not match"),
    "bad runtime": (lambda c: c.update(runtime="podman"), "runtime: 'podman' is not one of"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_fails_before_any_job_with_one_clear_error(tmp_path, case):
    mutate, expected = BAD_CONFIGS[case]
    proc = snakemake(tmp_path, "-n", "report", config=_mutated(mutate), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("invalid config:")]
    assert len(errors) == 1, output
    assert expected in errors[0]
    assert "rule benchmark" not in output  # nothing was scheduled
    assert not (tmp_path / "results").exists()


def test_default_config_plans_one_benchmark_job_per_variant_and_shape(tmp_path):
    config = default_config()
    proc = snakemake(tmp_path, "-n", "report", config=config, timeout=120)
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["benchmark"], ["collect"]))
    expected = len(config["variants"]) * len(config["shapes"])
    assert expected == 10
    assert counts == {"benchmark": "10", "collect": "1"}
