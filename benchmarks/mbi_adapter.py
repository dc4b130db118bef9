"""The peers' runner: private-pgm's MST and AIM scripts run on mbi 2.0, with the patches they need.

Not imported anywhere: ``benchmarks.peers.run_peer`` passes this file's text to the peers' own
Python (``python -c TEXT SEED SCRIPT ARGS...``, ``PYTHONPATH`` cleared, so mbi is the env's
``mbi==2.0.0``). It seeds numpy's global generator (the scripts and mbi's sampler draw all their
noise and choices from it), patches mbi as below, and runs SCRIPT as ``__main__`` with ARGS.
Why each patch (benchmarks/PEERS.md, "How mbi is imported"):

- ``Domain.attrs`` -> ``Domain.attributes`` and ``Estimator.estimate(potentials=...)`` ->
  ``estimate(warm_start=...)``: two names the scripts still use, deprecated aliases in mbi 1.3
  and gone in 2.0 (without the second, AIM fails at its second round).
- ``Dataset.to_dict``'s columns widened to int64: mbi 2.0 samples into the smallest unsigned
  type of the compressed domain (uint8 below 256 values), where mst.py's ``reverse_data`` then
  cannot write the original codes of a larger domain (pandas refuses 999 in uint8).
- ``MarkovRandomField.project`` with JAX's jit off: a marginal outside the model goes through
  mbi's ``variable_elimination``, jitted with the clique static, so every new pair was one XLA
  compilation (2-3.6 s under load); MST's selection asks for all m(m-1)/2 pairs, 990 on the
  45-column table (over 25 min). Eagerly each primitive is compiled once per shape and reused:
  the same operations, ~0.5 s a pair there.

Nothing else changes: the scripts run as their authors wrote them.
"""

import functools
import os
import runpy
import sys

import jax
import mbi
import numpy as np


def patch_mbi() -> None:
    """Apply the patches above to the imported mbi 2.0."""
    project_jitted = mbi.MarkovRandomField.project

    @functools.wraps(project_jitted)
    def project(self, attrs):
        with jax.disable_jit():
            return project_jitted(self, attrs)

    mbi.MarkovRandomField.project = project
    if not hasattr(mbi.Domain, "attrs"):
        mbi.Domain.attrs = property(lambda self: self.attributes)
    estimate_v2 = mbi.estimation.Estimator.estimate

    @functools.wraps(estimate_v2)
    def estimate(self, *args, potentials=None, **kwargs):
        if potentials is not None:
            kwargs.setdefault("warm_start", potentials)
        return estimate_v2(self, *args, **kwargs)

    mbi.estimation.Estimator.estimate = estimate
    to_dict = mbi.Dataset.to_dict
    mbi.Dataset.to_dict = lambda self: {k: np.asarray(v, np.int64)
                                        for k, v in to_dict(self).items()}


if __name__ == "__main__":  # as ``python -c``: argv is ["-c", SEED, SCRIPT, ARGS...]
    patch_mbi()
    np.random.seed(int(sys.argv[1]))  # noqa: NPY002 the scripts draw from the global one
    script = os.path.abspath(sys.argv[2])
    sys.argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")
