"""Past one process: batch evaluation and index build over ``torch.distributed`` (``torchrun``).

Each sharded job gives the result one process gives: evaluation deals whole batches out to the
ranks and rank 0 scores every prediction in the original order (:mod:`hpengine.distributed._eval`);
the index build shards extraction and the encoder's own batches and gathers them in order
(:mod:`hpengine.distributed._index`). The process group, the ranks' devices and the exchange that
fails every rank when one fails are in :mod:`hpengine.distributed._launch`.
"""
from hpengine.distributed._eval import (
    FAIL_RANK_ENV,
    answer_distributed,
    evaluate_distributed,
    run_eval_distributed,
    shard_batches,
    shard_questions,
    strip_timing,
)
from hpengine.distributed._index import ShardedEncoder, ShardedExtractor, run_index_distributed
from hpengine.distributed._launch import (
    TIMEOUT_ENV,
    check_torchrun_command,
    init_from_env,
    launched_by_torchrun,
    rank_device,
)

__all__ = [
    "FAIL_RANK_ENV",
    "ShardedEncoder",
    "ShardedExtractor",
    "TIMEOUT_ENV",
    "answer_distributed",
    "check_torchrun_command",
    "evaluate_distributed",
    "init_from_env",
    "launched_by_torchrun",
    "rank_device",
    "run_eval_distributed",
    "run_index_distributed",
    "shard_batches",
    "shard_questions",
    "strip_timing",
]
