"""The platform names, defined once (fabench.platforms): what a string becomes there, the questions
asked of a platform, and that no other module of src/fabench compares a value with a literal
"rocm", "cuda" or "cpu" (a new vendor, or a renamed one, would leave such a comparison behind)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from fabench.platforms import PlatformError, PlatformName
from fabench.resources import SCHEMA_DIR

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fabench"
# The module that defines the names; the others parse a string or compare with a member.
DEFINING = {PACKAGE / "platforms.py"}
# Comparisons whose literal is no platform (file, the comparison): torch's name of a device type,
# which is "cuda" on ROCm too.
NOT_PLATFORMS = {("fabench/measure/device/kernels.py", "'cuda' not in str(event.device_type()).lower()")}
NAMES = {platform.value for platform in PlatformName}


def names_a_platform(node: ast.AST) -> bool:
    """A literal platform name, or a literal tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(names_a_platform(element) for element in node.elts)
    return False


def literal_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, the comparison) wherever a value is compared with a literal platform name (==, !=,
    in, not in, is, on either side) or matched against one (match/case)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(names_a_platform, [node.left, *node.comparators])):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and names_a_platform(node.value):
            found.append((node.value.lineno, f"case {ast.unparse(node.value)}"))
    return sorted(found)


def test_no_module_compares_a_platform_with_a_literal_name():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {comparison}"
             for path in sorted(PACKAGE.rglob("*.py")) if path not in DEFINING
             for line, comparison in literal_comparisons(path.read_text())
             if (str(path.relative_to(PACKAGE.parent)), comparison) not in NOT_PLATFORMS]
    assert found == [], "compare with fabench.platforms.PlatformName, or ask it, instead:\n" + "\n".join(found)


def test_each_exception_is_still_there():
    """An exception the code no longer has would let that comparison back in unseen."""
    for file, comparison in NOT_PLATFORMS:
        assert comparison in [c for _, c in literal_comparisons((PACKAGE.parent / file).read_text())], file


@pytest.mark.parametrize("source", [
    'if platform == "cpu":\n    pass\n',
    'gpu = result["platform"] != "cpu"\n',
    'gpu = "rocm" == platform\n',
    'gpu = platform in ("cuda", "rocm")\n',
    'gpu = platform not in {"cuda"}\n',
    'match platform:\n    case "rocm":\n        pass\n',
])
def test_the_walk_finds_a_planted_literal_comparison(source):
    """The checker itself: each spelling of the comparison is found."""
    assert literal_comparisons(source) != []


@pytest.mark.parametrize("source", [
    'if platform == PlatformName.CPU:\n    pass\n',
    'gpu = PlatformName.parse(platform).is_gpu\n',
    'versions = {k: v for k in ("rocm", "hip", "torch")}\n',  # keys of a record, not a comparison
    'device = "cuda" if gpu else "cpu"\n',
    'ok = name == "cudnn"\n',
])
def test_the_walk_passes_what_is_no_literal_platform_comparison(source):
    assert literal_comparisons(source) == []


def test_a_string_becomes_a_platform_in_parse_only_and_stays_equal_to_it():
    for name in NAMES:
        platform = PlatformName.parse(name)
        assert platform == name and hash(platform) == hash(name) and f"{platform}" == name
        assert PlatformName.parse(platform) is platform
    # What results, configs and job specs hold is spelled as before.
    assert json.dumps({PlatformName.ROCM: PlatformName.CPU}) == '{"rocm": "cpu"}'
    assert {"cuda": 1}[PlatformName.CUDA] == 1


@pytest.mark.parametrize("value", ["tpu", "CPU", "", None, 3])
def test_a_string_that_names_no_platform_is_refused_in_one_line(value):
    with pytest.raises(PlatformError) as refused:
        PlatformName.parse(value)
    assert str(refused.value) == f"{value!r} is not a platform (expected one of rocm, cuda, cpu)"


def test_the_questions_asked_of_a_platform():
    assert [p.is_gpu for p in PlatformName] == [True, True, False]
    assert [p.settings_key for p in PlatformName] == ["timing", "timing", "cpu"]
    assert [p.torch_device for p in PlatformName] == ["cuda", "cuda", "cpu"]


def test_the_schemas_name_the_same_platforms():
    """The schemas are data, not code: they spell the names again, and must spell these."""
    result = json.loads((SCHEMA_DIR / "result.schema.json").read_text())
    published = yaml.safe_load((SCHEMA_DIR / "published.schema.yaml").read_text())
    config = yaml.safe_load((SCHEMA_DIR / "config.schema.yaml").read_text())
    hardware = published["properties"]["source"]["properties"]["hardware"]["properties"]
    assert result["properties"]["platform"]["enum"] == list(PlatformName)
    assert hardware["platform"]["enum"] == list(PlatformName)
    assert list(config["properties"]["roles"]["properties"]) == list(PlatformName)
