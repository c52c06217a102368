"""python -m fabench.cli: the `fabench` command."""

import sys

from fabench.cli import main

sys.exit(main())
