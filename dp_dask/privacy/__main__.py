"""``python -m dp_dask.privacy --table``: the σ table of docs/privacy.md."""

from dp_dask.privacy.accounting import main

main()
