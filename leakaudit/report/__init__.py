"""Reports of a finished run: metrics files, seaborn plots and one self-contained report.html."""

from leakaudit.report.blind_null import blind_text_verdict
from leakaudit.report.build import (build_report, compute_blind_null, compute_metrics, negatives_table,
                                    null_check_table, run_blind_null, run_headline, run_metrics)
from leakaudit.report.load import RunData, candidate_table, load_run
from leakaudit.report.teacher import literalness_tables, teacher_info

__all__ = ["blind_text_verdict", "build_report", "compute_blind_null", "compute_metrics", "negatives_table",
           "null_check_table", "RunData", "candidate_table", "literalness_tables", "load_run", "run_blind_null",
           "run_headline", "run_metrics", "teacher_info"]
