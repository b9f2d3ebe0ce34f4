"""``python -m monitor`` is the ``monitor`` console script."""

import sys

from monitor.cli import main

sys.exit(main())
