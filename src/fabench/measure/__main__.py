"""python -m fabench.measure: run one benchmark job (see fabench.measure.job)."""

import sys

from fabench.measure.job import main

sys.exit(main())
