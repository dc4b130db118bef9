"""dp_dask's version: the package's ``__version__``, and what every release records of the
library that made it (dp_dask.synthesizer.library_versions). A module of its own, importing
nothing, so that the code a release runs reads it without importing the package's face
(dp_dask/__init__.py imports the synthesizer)."""

__version__ = "0.1.0"
