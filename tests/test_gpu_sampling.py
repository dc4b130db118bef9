"""The GPU (CuPy) sampling path: chosen only when asked for, the CPU's distribution on a GPU.

The checks of the choice run everywhere; the draws on a GPU run where CuPy sees one and are
skipped otherwise (CI has none; docs/benchmarks.md has the device runs).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.copula.sample import gpu_available, resolve_device
from dp_dask.synthesizer import Synthesizer

needs_gpu = pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
without_gpu = pytest.mark.skipif(gpu_available(), reason="checks a machine without a GPU")
ROWS = 200_000


def _fitted(method: str, client) -> Synthesizer:
    return Synthesizer.create(method, SMALL_SCHEMA_PATH, epsilon=1e6, noise_sampler="numpy",
                              noise_seed=0, ledger=False).fit(correlated_frame(20_000, seed=3))


@pytest.fixture(scope="module")
def copula(client) -> Synthesizer:
    return _fitted("copula", client)


def test_the_cpu_is_the_default_and_is_recorded(copula, tmp_path):
    paths = copula.write(tmp_path / "release", 3_000, seed=1)
    metadata = json.loads(paths["metadata"].read_text())
    assert metadata["sampling"]["device"] == "cpu"


def test_an_unknown_device_is_refused(copula):
    with pytest.raises(ValueError, match="one of"):
        resolve_device(copula.model, "tpu")


def test_a_cpu_only_method_refuses_the_gpu_and_auto_keeps_it_on_the_cpu(client):
    marginals = _fitted("marginals", client)
    with pytest.raises(ValueError, match="samples on the CPU only"):
        marginals.write("unused", 100, device="gpu")
    assert resolve_device(marginals.model, "auto") == "cpu"


@without_gpu
def test_without_a_gpu_auto_is_the_cpu_and_gpu_is_a_clear_error(copula, tmp_path):
    assert resolve_device(copula.model, "auto") == "cpu"
    with pytest.raises(ValueError, match="needs CuPy"):
        copula.write(tmp_path / "release", 100, device="gpu")
    assert not (tmp_path / "release").exists()


def test_cli_refuses_an_unusable_device_before_the_fit_spends(tmp_path, data, capsys):
    out, ledger = tmp_path / "release", tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "marginals", "--sampling-device", "gpu",
                 "--ledger", str(ledger), "--quiet"])
    assert code == 2
    assert "samples on the CPU only" in capsys.readouterr().err
    assert not ledger.exists() and not out.exists()


def _one_hot(codes: np.ndarray, sizes: list[int]) -> np.ndarray:
    return np.hstack([np.eye(s, dtype=np.float32)[codes[:, i]] for i, s in enumerate(sizes)])


def _assert_same_law(a: np.ndarray, b: np.ndarray) -> None:
    """Every column's and pair of columns' frequency equal within 5 standard errors of the
    difference of two independent samples of ROWS rows."""
    pa, pb = a.T @ a / len(a), b.T @ b / len(b)  # diagonal: 1-way, off it: 2-way frequencies
    pooled = (pa + pb) / 2
    bound = 5 * np.sqrt(2 * pooled * (1 - pooled) / ROWS) + 1e-9
    assert np.all(np.abs(pa - pb) <= bound), np.max(np.abs(pa - pb) / bound)


@needs_gpu
def test_gpu_draws_have_the_cpu_draws_moments(copula):
    sizes = list(copula.schema.sizes)
    seed = np.random.SeedSequence(11)
    cpu = copula.model.sampler().draw(ROWS, seed)
    gpu = copula.model.sampler(device="gpu").draw(ROWS, seed)
    assert gpu[0].dtype == cpu[0].dtype and gpu[1].dtype == cpu[1].dtype
    assert not np.array_equal(cpu[1], gpu[1])  # another random stream
    _assert_same_law(cpu[0].astype(np.float32), gpu[0].astype(np.float32))
    _assert_same_law(_one_hot(cpu[1], sizes), _one_hot(gpu[1], sizes))


@needs_gpu
def test_gpu_draws_are_seeded(copula):
    sampler = copula.model.sampler(device="gpu")
    first, again = (sampler.draw(5_000, np.random.SeedSequence(4)) for _ in range(2))
    other = sampler.draw(5_000, np.random.SeedSequence(5))
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not np.array_equal(first[1], other[1])


@needs_gpu
def test_gpu_release_on_the_cluster(copula, tmp_path):
    paths = copula.write(tmp_path / "release", 30_000, seed=2, partition_rows=10_000,
                         device="gpu")
    assert json.loads(paths["metadata"].read_text())["sampling"]["device"] == "gpu"
    frame = pd.read_parquet(paths["parquet"])
    assert len(frame) == 30_000 and list(frame.columns) == copula.schema.names
    assert resolve_device(copula.model, "auto") == "gpu"
