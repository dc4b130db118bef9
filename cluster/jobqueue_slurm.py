"""Start a SLURM-backed Dask cluster and print its address for ``dp-dask --scheduler``.

Needs ``pip install dask-jobqueue`` on a SLURM login node. Run:
    python cluster/jobqueue_slurm.py --jobs 8
"""

from __future__ import annotations

import argparse
import time

if __name__ == "__main__":
    from dask_jobqueue import SLURMCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="SLURM jobs (one worker each)")
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--memory", default="32GiB")
    args = parser.parse_args()
    cluster = SLURMCluster(cores=args.cores, processes=args.cores, memory=args.memory)
    cluster.scale(jobs=args.jobs)
    print(f"dp-dask synth ... --scheduler {cluster.scheduler_address}", flush=True)
    while True:  # keep the scheduler alive until interrupted
        time.sleep(60)
