"""dp_dask: differentially private synthetic data with a Gaussian copula, out-of-core on Dask."""

__version__ = "0.1.0"  # before the imports: dp_dask.synthesizer records it

from dp_dask.model import CopulaModel
from dp_dask.schema import Attribute, Schema, SchemaError, load_schema
from dp_dask.synthesizer import GaussianCopulaSynthesizer

__all__ = [
    "Attribute",
    "CopulaModel",
    "GaussianCopulaSynthesizer",
    "Schema",
    "SchemaError",
    "load_schema",
    "__version__",
]
