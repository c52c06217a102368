import sys

from fabench.tune.job import main

sys.exit(main())
