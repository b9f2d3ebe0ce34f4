"""``python -m monitor`` is the ``monitor`` console script."""

import sys

from monitor.entry import main

sys.exit(main())
