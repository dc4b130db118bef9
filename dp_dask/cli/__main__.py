"""``python -m dp_dask.cli``."""

import sys

from dp_dask.cli import main

sys.exit(main())
