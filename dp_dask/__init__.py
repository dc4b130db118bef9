"""dp_dask: differentially private synthetic tables from noisy marginals, out-of-core on Dask."""

from dp_dask.copula.model import CopulaModel
from dp_dask.data.attribute import Attribute, SchemaError
from dp_dask.data.schema import Schema, load_schema
from dp_dask.methods.copula import GaussianCopulaSynthesizer
from dp_dask.methods.marginals import MarginalSynthesizer
from dp_dask.one_command import synthesize
from dp_dask.relational import release_tables
from dp_dask.synthesizer import Synthesizer
from dp_dask.version import __version__

__all__ = [
    "Attribute",
    "CopulaModel",
    "GaussianCopulaSynthesizer",
    "MarginalSynthesizer",
    "Schema",
    "SchemaError",
    "Synthesizer",
    "load_schema",
    "release_tables",
    "synthesize",
    "__version__",
]
