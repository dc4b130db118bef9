"""The keyword arguments that command-line flags give, in one table, so that an error speaks the
caller's language: the library's messages name keyword arguments (``dp_epsilon=``), and the CLI
prints them as its flags (``--dp-epsilon``) through :func:`as_flags`. A keyword absent here is
named as it is in both."""

from __future__ import annotations

import re

# keyword argument -> the flag that gives it (dp-dask schema draft, synth)
FLAGS = {
    "dp_epsilon": "--dp-epsilon",
    "dp_delta": "--dp-delta",
    "dp_columns": "--dp-columns",
    "dp_grids": "--dp-grid",
    "dp_bins": "--dp-bins",
    "ranges": "--range",
    "ids": "--ids",
    "on_unknown": "--on-unknown",
    "privacy_unit": "--privacy-unit",
    "public": "--public",
    "public_types": "--public-types",
    "tables": "--tables",  # dp-dask tables
    "max_children": "--max-children",
}
# "keyword=" naming the argument, not "name='value'" quoting one (a schema's own keys, e.g. an
# attribute's on_unknown='nope', are no flags)
_KEYWORD = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, FLAGS)) + r")=(?=\s|$|[,.;:)])")


def as_flags(message: str) -> str:
    """``message`` with each ``keyword=`` of :data:`FLAGS` named as its flag."""
    return _KEYWORD.sub(lambda match: FLAGS[match.group(1)], message)
