"""Model files: every method's model is ``<path>/model.json`` (its document: method, format,
schema, metadata) and ``<path>/model.npz`` (its arrays), on disk or in an object store; read
back checked (format, schema hash, array shapes, finite values), failing as :class:`ModelError`.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from typing import Any

import numpy as np

from dp_dask.data.attribute import SchemaError
from dp_dask.data.io import Location, join, npz_bytes, put_bytes, read_bytes
from dp_dask.data.schema import Schema

MODEL_FILES = ("model.json", "model.npz")


class ModelError(ValueError):
    """A saved model that is incomplete, corrupt or does not match its schema."""


def _check_format(path: Location, document: dict[str, Any], format_version: int | None) -> None:
    """ModelError unless the document is of ``format_version`` (when given)."""
    if format_version is not None and document.get("format") != format_version:
        raise ModelError(f"model {path}: model format {document.get('format')} is not supported "
                         f"(this dp_dask reads format {format_version}): fit again")


def read_model_document(path: Location, format_version: int | None = None,
                        storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``<path>/model.json``, checked: a valid JSON object (of ``format_version``, if given).
    ``path`` may be an object-store URL, read with ``storage_options``."""
    try:
        text = read_bytes(join(path, "model.json"), storage_options)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise FileNotFoundError(f"{path} holds no model.json: not a dp_dask model "
                                "directory") from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"model {path}/model.json is not valid JSON (truncated or edited?): "
                         f"{exc}") from None
    if not isinstance(document, dict):
        raise ModelError(f"model {path}/model.json is not a JSON object")
    _check_format(path, document, format_version)
    return document


def write_model_files(path: Location, document: dict[str, Any], arrays: dict[str, np.ndarray],
                      storage_options: dict[str, Any] | None = None) -> Location:
    """``<path>/model.npz`` (``arrays``) and ``<path>/model.json`` (``document``): the layout
    every method's model shares, read back by :func:`read_model_document`,
    :func:`model_schema` and :func:`read_model_arrays`. Each file is written whole
    (:func:`put_bytes`), on disk or in an object store."""
    put_bytes(join(path, "model.npz"), npz_bytes(arrays), storage_options)
    put_bytes(join(path, "model.json"), json.dumps(document, indent=2).encode(),
              storage_options)
    return path


def model_schema(path: Location, document: dict[str, Any],
                 format_version: int | None = None) -> Schema:
    """The model's schema, if the model is of ``format_version`` (when given) and its schema
    still has the hash recorded at the fit (an edited schema would make the saved arrays mean
    something else)."""
    _check_format(path, document, format_version)
    try:
        schema = Schema.from_json(document["schema"])
    except (KeyError, SchemaError) as exc:
        raise ModelError(f"model {path}/model.json: invalid schema ({exc})") from None
    recorded = document.get("metadata", {}).get("schema", {}).get("sha256")
    if recorded is not None and recorded != schema.sha256():
        raise ModelError(f"model {path}: its schema was edited after the fit (sha256 "
                         f"{schema.sha256()[:12]}…, recorded {recorded[:12]}…); restore "
                         "model.json or fit again")
    return schema


def read_model_arrays(path: Location, shapes: dict[str, tuple[int, ...]],
                      storage_options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Every array of ``<path>/model.npz`` named in ``shapes``, of that shape, all finite."""
    file = join(path, "model.npz")
    try:
        with np.load(io.BytesIO(read_bytes(file, storage_options))) as arrays:
            loaded = {name: arrays[name] for name in arrays.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"model {path} holds no model.npz") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ModelError(f"model {file} is unreadable (truncated or corrupt): {exc}") from None
    for name, shape in shapes.items():
        if name not in loaded:
            raise ModelError(f"model {file} lacks the array {name!r}: fit again")
        if loaded[name].shape != shape:
            raise ModelError(f"model {file}: array {name!r} has shape {loaded[name].shape}, "
                             f"its schema needs {shape}: fit again")
        if not np.isfinite(loaded[name]).all():
            raise ModelError(f"model {file}: array {name!r} holds NaN or infinite values: "
                             "the model is corrupt, fit again")
    return loaded
