"""``python -m metashift.cli``: the ``metashift`` command (children of the sandbox and the tests run it so)."""

import sys

from metashift.cli import main

sys.exit(main())
