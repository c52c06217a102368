"""Docs that cannot go stale silently: every module, file, function, config key, Snakemake target and
fabench command that the README, docs/*.md or a docstring of src/fabench names exists.

What counts as a name (prose is not parsed; code is):
- anywhere: `fabench.x.y[.attr]` (a module, then attributes of it), `src/fabench/...` or
  `fabench/...` paths, and a bare call `name()` (a function or method of src/fabench or of the
  workflow's rules, a parameter that holds one, or Python's own);
- in `code` and code blocks: `module.attr` where module is the stem of a module of src/fabench (the
  attribute must be defined in one such module), `name.py` (a file of that name in the checkout),
  dotted config keys (`cpu.min_trial_ms`: a path through workflow/schemas/config.schema.yaml), and
  the targets of `snakemake ...` and the command of `fabench ...`.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from fabench.cli import COMMANDS
from workflow_util import REPO

SRC = REPO / "src"
PACKAGE = SRC / "fabench"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "csv", "png", "html", "txt", "j2", "smk", "toml", "rst",
                 "sh", "in", "lock", "log", "svg", "pdf", "whl", "gz", "meta"}
# snakemake's options that take a value (the next word), or several (--config: words with "=")
SNAKEMAKE_VALUE_OPTIONS = {"--cores", "-c", "--jobs", "-j", "--profile", "--configfile", "--configfiles",
                           "--report", "-s", "--snakefile", "--directory", "-d", "--resources", "--forcerun",
                           "-R", "--until", "-U", "--set-threads", "--default-resources", "--executor", "-e",
                           "--report-stylesheet", "--rerun-triggers"}
SHELL_ENDS = {"&&", "||", "|", ";", "#", "\\"}


# ---------------------------------------------------------------- what exists

@cache
def module_files() -> dict[str, Path]:
    """fabench.x.y -> its source file, for every module and package of src/fabench."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def defined_names(path: Path) -> dict[str, set[str]]:
    """A module's top-level names, and each top-level class's names under "<Class>"."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {"": set()}

    def collect(body, into: set[str]):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                into.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                into.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                into.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                collect(node.body, into)

    collect(tree.body, names[""])
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            collect(node.body, names.setdefault(node.name, set()))
    return names


def has_attributes(path: Path, attributes: list[str]) -> bool:
    names = defined_names(path)
    if not attributes or attributes[0] not in names[""]:
        return not attributes
    return len(attributes) == 1 or attributes[0] not in names or attributes[1] in names[attributes[0]]


@cache
def module_stems() -> dict[str, list[Path]]:
    stems: dict[str, list[Path]] = {}
    for name, path in module_files().items():
        stems.setdefault(name.rsplit(".", 1)[-1], []).append(path)
    return stems


@cache
def file_names() -> set[str]:
    return {p.name for p in REPO.rglob("*.py") if ".git" not in p.parts}


@cache
def config_schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


def schema_node(node: dict, part: str) -> dict | None:
    """The schema of key `part` below `node` (properties, a map's values, a list's items), or None."""
    while "$ref" in node:
        node = config_schema()["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    for option in node.get("oneOf", []) + node.get("anyOf", []):
        found = schema_node(option, part)
        if found is not None:
            return found
    if part in node.get("properties", {}):
        return node["properties"][part]
    if isinstance(node.get("additionalProperties"), dict):
        return node["additionalProperties"]
    if part.isdigit() and isinstance(node.get("items"), dict):
        return node["items"]
    return None


def config_key_exists(dotted: str) -> bool:
    node = config_schema()
    for part in dotted.split("."):
        node = schema_node(node, part)
        if node is None:
            return False
    return True


@cache
def result_schema() -> dict:
    return json.loads((REPO / "workflow" / "schemas" / "result.schema.json").read_text())


@cache
def result_fields() -> dict[str, list[dict]]:
    """Every property name of workflow/schemas/result.schema.json -> the schemas it has."""
    fields: dict[str, list[dict]] = {}

    def walk(node):
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                fields.setdefault(name, []).append(sub)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(result_schema())
    return fields


def result_field_exists(dotted: str) -> bool:
    """`stats.device_ms`: a field of a job's result, below a field of that name anywhere in it (an
    object whose keys the schema leaves open takes any)."""
    head, *rest = dotted.split(".")

    def resolve(node, parts):
        while "$ref" in node:
            node = result_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        if not parts:
            return True
        if parts[0] in (node.get("properties") or {}):
            return resolve(node["properties"][parts[0]], parts[1:])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return resolve(extra, parts[1:])
        return "properties" not in node and extra is None and "object" in str(node.get("type"))

    return any(resolve(node, rest) for node in result_fields().get(head, []))


@cache
def callables() -> set[str]:
    """Every name a bare `name()` may mean: a module's function in src/fabench or in the workflow's
    rules (common.smk's input functions), a parameter that holds one, Python's own. A method is
    named with its class (`Plan.measure_mode`): bare, it reads as a function that is not there."""
    names = set(dir(builtins))
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names.update(node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.update(a.arg for a in node.args.args + node.args.kwonlyargs)
    for path in [REPO / "Snakefile", *(REPO / "workflow").rglob("*.smk")]:
        names.update(re.findall(r"^def (\w+)\(", path.read_text(), re.M))
    return names


@cache
def snakemake_rules() -> set[str]:
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *(REPO / "workflow" / "rules").glob("*.smk")])
    return set(re.findall(r"^(?:rule|checkpoint) (\w+):", text, re.M))


# ---------------------------------------------------------------- what a text names

def docstrings() -> list[tuple[str, str]]:
    """(where, docstring) of every module, class and function of src/fabench."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found.append((f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 1)}", doc))
    return found


def code_of(text: str) -> list[str]:
    """The `code` spans and the lines of ``` blocks of a text."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines()] + re.findall(r"`([^`\n]+)`", rest)


def command_words(code: str, program: str) -> list[list[str]]:
    """The words after each `program` in a line of code, up to the shell's next command."""
    found = []
    for match in re.finditer(rf"(?:^|[\s(]){program}((?: +[^\s]+)*)", code):
        words = []
        for word in match.group(1).split():
            if word in SHELL_ENDS or word.startswith("#"):
                break
            words.append(word)
        found.append(words)
    return found


def snakemake_targets(words: list[str]) -> list[str]:
    targets, skip, in_config = [], False, False
    for word in words:
        if word != word.rstrip("),:;."):  # the command ends within the sentence
            word, words = word.rstrip("),:;."), []
        if skip:
            skip = False
        elif word.startswith("-"):
            in_config = word == "--config"
            skip = word in SNAKEMAKE_VALUE_OPTIONS
        elif in_config and "=" in word:
            continue
        elif re.fullmatch(r"[a-z_]+", word):
            targets.append(word)
        else:
            in_config = False
        if not words:
            break
    return targets


def problems_in(text: str) -> list[str]:
    problems = []
    for dotted in re.findall(r"(?<![\w/.])fabench(?:\.\w+)+", text):
        parts = dotted.split(".")
        known = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in module_files()), default=0)
        if not known or not has_attributes(module_files()[".".join(parts[:known])], parts[known:]):
            problems.append(f"no such module or name: {dotted}")
    for path in re.findall(r"(?<![\w/.])((?:src/)?fabench/[\w/]*\w(?:\.[\w]+)*/?)", text):
        if not (SRC / path.removeprefix("src/")).exists():
            problems.append(f"no such path: {path}")
    for name in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\(\)", text):
        if name not in callables():
            problems.append(f"no such function: {name}()")
    for code in code_of(text):
        problems += code_problems(code)
    return problems


def code_problems(code: str) -> list[str]:
    problems = []
    for dotted in re.findall(r"(?<![\w/.$-])([A-Za-z_]\w*(?:\.\w+)+)(?![\w/(-])", code):
        head, *rest = dotted.split(".")
        if rest[-1] in FILE_SUFFIXES or head == "fabench":
            if rest == ["py"] and "/" not in code and dotted not in file_names():
                problems.append(f"no such file: {dotted}")
            continue
        if config_key_exists(dotted) or result_field_exists(dotted):
            continue
        if head in module_stems():
            if not any(has_attributes(path, rest) for path in module_stems()[head]):
                problems.append(f"no such function or name: {dotted}")
        elif head in config_schema()["properties"]:
            problems.append(f"no such config key: {dotted}")
    for words in command_words(code, "snakemake"):
        problems += [f"no such snakemake target: {t}" for t in snakemake_targets(words) if t not in snakemake_rules()]
    commands = {command for command, _ in COMMANDS}
    for words in command_words(code, "fabench"):
        if words and re.fullmatch(r"[a-z-]+", words[0]) and words[0] not in commands:
            problems.append(f"no such fabench command: {words[0]}")
        elif words[:1] == ["archive"] and len(words) > 1 and ("archive", words[1]) not in COMMANDS:
            problems.append(f"no such fabench command: archive {words[1]}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[doc.relative_to(REPO).as_posix() for doc in DOCS])
def test_every_name_a_doc_gives_exists(doc):
    assert problems_in(doc.read_text()) == []


def test_every_name_a_docstring_gives_exists():
    found = {where: problems for where, text in docstrings() if (problems := problems_in(text))}
    assert found == {}


# ---------------------------------------------------------------- the checker itself finds them

@pytest.mark.parametrize("text,problem", [
    ("`kernels.call_spans_ms`", "no such function or name: kernels.call_spans_ms"),
    ("see fabench.analysis.verdict", "no such module or name: fabench.analysis.verdict"),
    ("`verdict.py`", "no such file: verdict.py"),
    ("src/fabench/analysis/verdict.py", "no such path: src/fabench/analysis/verdict.py"),
    ("`cpu.min_trial`", "no such config key: cpu.min_trial"),
    ("```\nsnakemake --cores 1 --config run=x archiv\n```", "no such snakemake target: archiv"),
    ("`fabench archive stor results/local`", "no such fabench command: archive stor"),
    ("`fabench comapre`", "no such fabench command: comapre"),
    ("`measure_mode()` in workflow/rules/common.smk", "no such function: measure_mode()"),
    ("the plan's checked_twice() asks", "no such function: checked_twice()"),
])
def test_a_name_that_does_not_exist_is_found(text, problem):
    assert problem in problems_in(text)


def test_names_that_exist_pass():
    text = ("`fabench.plan.Plan.checked`, fabench.results.archive_store, `kernels.warm_profiler`, "
            "`cpu.min_trial_ms`, `variants.tuned.triton.BLOCK_M`, `shapes.0.head_dim`, `plan.py`, "
            "`snakemake -n --profile profiles/slurm report`, `snakemake --report report.html compare`, "
            "`fabench archive store results/local`, `config.yaml`, `make_plan()`, timing(), here(), print()")
    assert problems_in(text) == []
