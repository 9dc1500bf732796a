"""``python -m aiopdbp``: the same commands as the ``aiopdbp`` console script."""

import sys

from .cli import main

sys.exit(main())
