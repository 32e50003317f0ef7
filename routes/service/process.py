"""Process-wide runtime choices, made once at startup by the entry points (never at import).

On 2 cores torch and FAISS each start OpenMP thread pools that spin-wait against each other
(a hybrid query measured ~500 ms instead of ~15 ms); a passive wait policy avoids it.
"""

from __future__ import annotations

import os


def configure_process(threads: int | None = None) -> None:
    """Set OpenMP policy and thread counts before torch/FAISS load; quiet offline model loading."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch

        torch.set_num_threads(threads)
