"""What an entry point runs: the ``index``, ``add``, ``delete`` and ``update`` jobs, ``eval`` / ``ask`` /
``demo``, the GRAG build, ``report``, resumable evaluation (checkpoints) and the path checks every
job makes before any work. Each job composes the engine (:mod:`hpengine.pipeline`) with the index store, the models
and the metrics; ``hpengine grag-build`` (alias ``python -m hpengine.jobs.grag_build``) is the
GRAG build's front door."""
from hpengine.jobs._checkpoint import (
    EvalCheckpoint,
    check_checkpoint_path,
    checkpoint_files,
    prediction_from_json,
    prediction_to_json,
    rank_path,
    run_fingerprint,
)
from hpengine.jobs._eval import (
    answer_batch,
    evaluate,
    format_prediction,
    hop_diagnostics,
    make_engine,
    path_stats,
    run_demo,
    run_eval,
    summary_table,
    write_result,
)
from hpengine.jobs._grag_build import build_grag, format_grag_report, run_grag_build
from hpengine.jobs._edit import built_graph_config, format_edit_report, run_delete, run_update
from hpengine.jobs._index import (
    build_from_corpus,
    format_add_report,
    format_report,
    index_writer,
    load_index_corpus,
    make_models,
    run_add,
    run_index,
)
from hpengine.jobs._paths import (
    check_index_dir,
    check_output_dir,
    check_output_file,
    check_outputs_apart,
    check_writable,
    peek_index_meta,
)
from hpengine.jobs._report import REPORT_USAGE, parse_report_args, report_main, run_report
from hpengine.jobs._train import check_one_validation, format_train_report, parse_train_args, run_train

__all__ = [
    "format_add_report",
    "check_one_validation",
    "format_train_report",
    "parse_train_args",
    "run_train",
    "EvalCheckpoint",
    "REPORT_USAGE",
    "answer_batch",
    "build_from_corpus",
    "build_grag",
    "built_graph_config",
    "check_checkpoint_path",
    "check_index_dir",
    "check_output_dir",
    "check_output_file",
    "check_outputs_apart",
    "check_writable",
    "checkpoint_files",
    "evaluate",
    "format_edit_report",
    "format_grag_report",
    "format_prediction",
    "format_report",
    "hop_diagnostics",
    "index_writer",
    "load_index_corpus",
    "make_engine",
    "make_models",
    "parse_report_args",
    "path_stats",
    "peek_index_meta",
    "prediction_from_json",
    "prediction_to_json",
    "rank_path",
    "report_main",
    "run_add",
    "run_delete",
    "run_demo",
    "run_eval",
    "run_fingerprint",
    "run_grag_build",
    "run_index",
    "run_report",
    "run_update",
    "summary_table",
    "write_result",
]
