"""The pipeline: one runner (leakaudit.pipeline.runner) runs a design (leakaudit.pipeline.design) through the stages.

Modules, from the bottom: `targets` (what is attacked: a model or an API endpoint), `context` (what a stage or a
job knows of its run), `design` (the hooks a design fills in), `study_design` and `audit_design` (the keep-matrix
study and the disjoint audit, with `audit_records` and `audit_outputs`), the stage modules (`teacher_stage`,
`training`, `signals_stage`, `results`), `jobs` (what an executor runs), `stages` and `checks` (the stage list and
the checks before the first file), and `runner`. leakaudit.study picks the design a config describes.
"""
