"""dp_dask's own warning category, which any layer may raise: a module importing nothing of
dp_dask, so that the data layer warns without importing the checks above it."""


class DpDaskWarning(UserWarning):
    """A legal but probably unintended setting (the CLI prints it as ``dp-dask: warning:``)."""
