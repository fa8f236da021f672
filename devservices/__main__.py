"""``python -m devservices up|env|status|down``: see :mod:`devservices.cli`."""

import sys

from devservices.cli import main

sys.exit(main())
