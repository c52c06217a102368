"""python -m fabench.measure: run one benchmark job (see fabench.measure.launch.runner)."""

import sys

from fabench.measure.launch.runner import main

sys.exit(main())
