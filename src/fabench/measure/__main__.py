"""python -m fabench.measure: run one benchmark job (see fabench.measure.runner)."""

import sys

from fabench.measure.runner import main

sys.exit(main())
