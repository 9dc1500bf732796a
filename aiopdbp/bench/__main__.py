"""``python -m aiopdbp.bench``: the same as ``aiopdbp bench``."""

import sys

from .cli import main

sys.exit(main())
