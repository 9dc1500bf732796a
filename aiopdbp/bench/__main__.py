"""``python -m aiopdbp.bench``: the same as ``aiopdbp bench``."""

import sys

from aiopdbp.bench.cli import main

sys.exit(main())
