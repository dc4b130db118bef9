"""A value's text: how a categorical value is compared with the schema's categories.

Value by value, whatever the column's dtype (the encoding must not depend on the dtype mix of a
partition): 3.0 and 3 are "3", 2.5 is "2.5", True is "True". The vectorised paths give the same
text as :func:`value_text` value by value (tests/test_neighbours.py).
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pandas as pd


def _float_text(numbers: np.ndarray) -> np.ndarray:
    """Each float's text on its own: integral → the integer (3.0 → "3"), else repr ("2.5")."""
    integral = np.isfinite(numbers) & (numbers == np.floor(numbers))
    small = integral & (np.abs(numbers) < 2.0**63)
    text = numbers.astype(str)  # numpy's shortest round-trip repr, element by element
    if small.any():
        digits = numbers[small].astype(np.int64).astype(str)
        if text.dtype.itemsize < digits.dtype.itemsize:
            text = text.astype(digits.dtype)
        text[small] = digits
    huge = integral & ~small  # beyond int64 (rare): exact integer text, one by one
    if huge.any():
        text = text.astype(object)
        text[huge] = [str(int(v)) for v in numbers[huge]]
    return text


def value_text(value: object) -> str:
    """One value's text; element-wise twin of the vectorised paths of :func:`category_text`."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        integral = math.isfinite(value) and float(value).is_integer()
        return str(int(value)) if integral else str(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return str(int(value))
    return str(value)


def category_text(values: pd.Series) -> tuple[np.ndarray | pd.Series, np.ndarray | None]:
    """The text each value is compared with a categorical attribute's categories as.

    The text is a function of each value alone, never of the other rows or of the column's
    dtype: a string is itself; a bool is "True"/"False"; an integer is its decimal digits; a
    float that is integral is the integer's digits (3.0 → "3", so a float column read from
    Parquet matches categories "1", "2", ...), any other float is its shortest repr ("2.5",
    "inf", "1e-05"); anything else is ``str(value)``. Missing values (None, NaN, pd.NA, NaT) are
    left to the caller's ``isna`` mask.

    Returns ``(texts, inverse)``: row r compares as ``texts[inverse[r]]`` (``inverse`` may be -1
    where the value is missing), or as ``texts[r]`` when ``inverse`` is None (an object column
    of strings, returned as it is). Distinct values are converted once; they are found with
    ``pd.factorize`` only within one type, where equal values have equal text: in an object
    column factorize alone would merge ``True``, ``1`` and ``1.0``.
    """
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):  # the rule applied to each category
        texts, inverse = category_text(pd.Series(dtype.categories))
        texts = np.asarray(texts, dtype=object)
        return texts if inverse is None else texts[inverse], values.cat.codes.to_numpy()
    if pd.api.types.is_bool_dtype(dtype):
        flags = values.to_numpy(dtype=bool, na_value=False)
        return np.array(["False", "True"], dtype=object), flags.astype(np.intp)
    if pd.api.types.is_integer_dtype(dtype):
        numbers = values.to_numpy(dtype=getattr(dtype, "numpy_dtype", dtype), na_value=0)
        inverse, distinct = pd.factorize(numbers)
        return distinct.astype(str).astype(object), inverse
    if pd.api.types.is_float_dtype(dtype):
        numbers = values.to_numpy(dtype=getattr(dtype, "numpy_dtype", dtype), na_value=np.nan)
        inverse, distinct = pd.factorize(numbers)  # NaN → -1; 0.0 and -0.0 are both "0"
        return _float_text(distinct).astype(object), inverse
    if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        if dtype == np.dtype(object):
            return values, None  # an object column holding only str, as it is
        inverse, distinct = pd.factorize(values)  # str dtypes: Arrow's factorize is much faster
        return np.asarray(distinct, dtype=object), inverse
    return _object_text(values.astype(object).to_numpy())


# Types whose equal values always have equal text (so pd.factorize may merge them within a type).
_PLAIN_TYPES = frozenset({str, bool, int, float, np.bool_, np.int8, np.int16, np.int32, np.int64,
                          np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                          np.float64, np.longdouble})


def _object_text(objects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`category_text` of an object array mixing types: each distinct (type, value) once.

    pd.factorize alone would merge ``True``, ``1`` and ``1.0`` (equal in Python), so values are
    grouped by exact type too; types outside _PLAIN_TYPES are converted one by one.
    """
    n = len(objects)
    type_codes, types = pd.factorize(np.fromiter(map(type, objects), dtype=object, count=n))
    plain = np.flatnonzero(np.isin(type_codes, [i for i, t in enumerate(types)
                                                if t in _PLAIN_TYPES]))
    value_codes, _ = pd.factorize(objects[plain])  # NaN/None: -1, left to the missing mask
    plain = plain[value_codes >= 0]
    keys = value_codes[value_codes >= 0].astype(np.int64) * len(types) + type_codes[plain]
    grouped, _ = pd.factorize(keys)  # codes in order of first appearance
    first = np.flatnonzero(~pd.Index(grouped).duplicated())
    rest = np.ones(n, dtype=bool)
    rest[plain] = False
    others = np.flatnonzero(rest)
    texts = [value_text(v) for v in objects[plain[first]]]
    texts += [value_text(v) for v in objects[others]]
    inverse = np.empty(n, dtype=np.intp)
    inverse[plain] = grouped
    inverse[others] = len(first) + np.arange(len(others))
    return np.array(texts, dtype=object), inverse
