"""dp_dask's version: the package's ``__version__``, and what every release records of the
libraries that made it (:func:`library_versions`). A module of its own, importing nothing of
dp_dask, so that the code a release runs reads it without importing the package's face
(dp_dask/__init__.py imports the synthesizer)."""

import importlib.metadata

__version__ = "0.1.0"


def library_versions() -> dict[str, str]:
    names = ["dask", "distributed", "numpy", "scipy", "pandas", "pyarrow", "zarr", "opendp"]
    return {"dp_dask": __version__, **{name: _version(name) for name in names}}


def _version(name: str) -> str:
    """A release records what made it, "not installed" included (a seeded-noise run on a
    machine without OpenDP), rather than failing after the fit."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
