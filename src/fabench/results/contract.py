"""The result contract in code: the facts about a job's result that the measure stage writes and
every reader (collector, report, archive, compare) relies on. The measure stage defines what it
records (fabench.measure.record); this module hands those names on to the readers, beside where the
JSON schema that checks a result file lies (workflow/schemas/result.schema.json; a test keeps the
two in agreement). Importing this module needs no torch, so the host-side stages can use it.
"""

from __future__ import annotations

from fabench.measure.record import (  # noqa: F401 (handed on to the readers)
    FAILURE_KINDS, FLOP_CONVENTION, PROCESS_FAILED_KEY, SCHEMA_VERSION, SHARED_KEY, SKIPPED_KEY,
    WALL_METHOD, backend_entry)
from fabench.resources import SCHEMA_DIR

SCHEMA_PATH = SCHEMA_DIR / "result.schema.json"
