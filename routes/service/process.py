"""Process-wide runtime choices, made once at startup by the entry points (never at import).

On 2 cores torch and FAISS each start OpenMP thread pools that spin-wait against each other
(a hybrid query measured ~500 ms instead of ~15 ms); a passive wait policy avoids it.
"""

from __future__ import annotations

import os


# What a serving process's environment must hold before torch or FAISS loads (a process that
# another one starts, such as a shard replica, gets them in its environment from the start).
PROCESS_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def configure_process(threads: int | None = None) -> None:
    """Set OpenMP policy and thread counts before torch/FAISS load; quiet offline model loading."""
    for name, value in PROCESS_ENV.items():
        os.environ.setdefault(name, value)
    if threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch

        torch.set_num_threads(threads)
