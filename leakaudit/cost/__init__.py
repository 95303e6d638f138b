"""What a study costs before it runs (`leakaudit run-study --dry-run`): models, OPD steps, tokens, FLOPs, peak memory
per job and wall time, on this machine (from rates measured on an earlier run) and on a named GPU class.

The model, stated so it can be checked (bench/cost_check.py compares it with stored runs' stage times):
- tokens: every rollout and sampled trajectory is taken to run to its token cap (an upper bound: EOS ends earlier);
  prompt, teacher-context and reference-text lengths are the records' own means when the records are given, else
  the data section's token budgets (upper bounds).
- FLOPs: 2 N per token forward, 6 N forward + backward (N = the model's matmul parameters, LM head included;
  attention's quadratic term left out: contexts here are under 2k tokens).
- students: per student, each pass over its records samples a rollout (prefill + decode), runs the teacher over the
  completion (its context once per record with the prefix cache) and updates on prompt + completion.
- signals: each target samples n_per_record trajectories per candidate; each trajectory is scored by the target,
  the base, the record's matched OUT references and every offline reference (the prompt once per record
  with share_prefix); every model scores its domain's candidates + population as fixed texts (prompt + reference).
- this machine: seconds = FLOPs / the FLOP rate one earlier run of the same stage achieved here (CostRates: a
  stored run's stage times over its FLOPs under this model); this folds decode's memory-boundness, padding and
  the execution settings of that run into one number per stage.
- a GPU: dense work (prefill, teacher, update, scoring) at `dense_utilisation` of the card's bf16 peak; decoding
  one token for a batch of rows reads the bf16 weights once, at `bandwidth_utilisation` of its memory bandwidth,
  and takes at least its kernel launches (KERNEL_LAUNCH_S_PER_LAYER per layer).
- peak memory per job: fp32 weights + grads + AdamW (16 N bytes), the fp32 teacher (4 N), the bf16 rollout copy,
  the teacher prefix cache, the micro-batch's logits (student, teacher, their softmaxes and the gradient: 4 copies
  of [micro, new tokens, vocab] fp32) and the layer activations (34 H bytes per token per layer, bf16).

The parts, one job each, from the bottom: ``shapes`` (the model's shape), ``lengths`` (token lengths per record),
``workload`` (what a run trains and scores), ``estimate`` (FLOPs, tokens and peak memory per stage), ``rates``
(fitted FLOP rates of a machine class), ``gpu`` (GPU classes and seconds on one), ``printout`` (the dry run's text)
and ``prepared`` (a prepared study's cost, dry run and estimate here).
"""

from leakaudit.cost.estimate import STAGE_NAMES, StageCost, StudyCost, study_cost
from leakaudit.cost.gpu import KERNEL_LAUNCH_S_PER_LAYER, GPUClass, gpu_classes, seconds_on_gpu
from leakaudit.cost.lengths import Lengths, budget_lengths, measured_lengths
from leakaudit.cost.prepared import dry_run, estimate_here, prepared_study_cost
from leakaudit.cost.printout import duration_text, format_plan
from leakaudit.cost.rates import (CostRates, fit_rates, rates_for, read_rates, seconds_here, stored_rates_path,
                                  write_rates)
from leakaudit.cost.shapes import ModelShape, model_shape
from leakaudit.cost.workload import Workload, workload_from_config, workload_from_study

__all__ = ["KERNEL_LAUNCH_S_PER_LAYER", "STAGE_NAMES", "CostRates", "GPUClass", "Lengths", "ModelShape", "StageCost",
           "StudyCost", "Workload", "budget_lengths", "dry_run", "duration_text", "estimate_here", "fit_rates",
           "format_plan", "gpu_classes", "measured_lengths", "model_shape", "prepared_study_cost", "rates_for",
           "read_rates", "seconds_here", "seconds_on_gpu", "stored_rates_path", "study_cost", "workload_from_config",
           "workload_from_study", "write_rates"]
