"""dp_dask: differentially private synthetic data with a Gaussian copula, out-of-core on Dask."""

from dp_dask.schema import Attribute, Schema, SchemaError, load_schema

__version__ = "0.1.0"
__all__ = ["Attribute", "Schema", "SchemaError", "load_schema", "__version__"]
