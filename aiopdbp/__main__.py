"""``python -m aiopdbp``: the same commands as the ``aiopdbp`` console script."""

import sys

from aiopdbp.cli import main

sys.exit(main())
