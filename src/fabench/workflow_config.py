"""The workflow's config as a user gives it: their --configfile files and --config layered on top of
config.yaml (fabench.config_layers), then checked before the plan is made (fabench.plan): the
schema, the rules across keys the schema cannot state, the sweep's rules, and the published
numbers file. Relative paths in the config are relative to the project.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fabench import config_layers
from fabench import config as fabench_config
from fabench.resources import SCHEMA_DIR
from fabench.results.published import PublishedError, load_published
from fabench.tune import settings as sweep_settings


def layer_user_config(command_line: dict, configfiles: list, config_args: list[str] | None,
                      schemas: Path = SCHEMA_DIR) -> dict:
    """The values a user's --configfile files and --config put on top of config.yaml, as
    fabench.config_layers describes; returns --config's values typed as in a YAML file (the caller
    merges them as Snakemake merges, then calls config_layers.replace_whole_values). `config_args`
    is Snakemake's own record of --config's `key=value` texts (workflow.config_settings.config_args)."""
    schema = _config_schema(schemas)
    typed = config_layers.command_line_values(dict(command_line), schema, config_args)
    # Snakemake has read these files already (a missing or broken one stops it before this).
    files = [yaml.safe_load(Path(path).read_text()) or {} for path in configfiles]
    return {"command_line": typed, "files": files}


def check_config(config: dict, project: Path, schemas: Path = SCHEMA_DIR) -> None:
    """ConfigError for the first thing that would stop the run: a schema violation, a rule across keys
    the schema cannot state, the sweep's rules, or a published-numbers file that is missing or not
    what the report reads. Relative paths in the config are relative to `project`."""
    schema = _config_schema(schemas)
    problem = (fabench_config.schema_error(config, schema) or fabench_config.consistency_error(config)
               or sweep_settings.config_error(config)
               or published_error(config.get("published"), schemas, project))
    if problem:
        raise fabench_config.ConfigError(problem)


def published_error(published: str | None, schemas: Path, project: Path) -> str | None:
    if published is None:
        return None
    path = project / published
    if not path.is_file():
        return (f"published: no file at {path} (a path relative to the project; "
                "for no published numbers set published: null, or --config published=)")
    try:
        load_published(path, schemas / "published.schema.yaml")
    except PublishedError as err:
        return f"published: {err}"
    return None


def _config_schema(schemas: Path) -> dict:
    """The config schema in `schemas`: the package's, read once (fabench.config.config_schema), unless
    a caller names another folder."""
    if schemas == SCHEMA_DIR:
        return fabench_config.config_schema()
    return fabench_config.shipped_yaml(schemas / "config.schema.yaml")
