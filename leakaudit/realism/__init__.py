"""A realism card for the targets of a finished run: are the attacked students plausible models, or
degenerate ones?

Computed from what a finished run already stores; no model is loaded or run, and nothing a model wrote is ever
executed (code samples are only parsed with ``ast.parse``). Per attacked target (``plan.views()``: each student,
an audit's target, each null student, labelled with ``null_check`` and ``label_source``):

- ``training``: from ``models/<id>/meta.json``: records trained on (``len(record_ids)``), how many are candidates
  (its members), population records, background records (meta ``n_background`` when it records it, else counted:
  trained records that are neither candidates nor population), passes (``epochs``), optimizer steps (``steps``)
  and members as a fraction of the training set. None for a model the run did not train (an audit's target).
- ``sampling``: the fresh trajectories' sampling parameters (``signals/fresh/<target>/sampling.json``) and
  whether the Monte-Carlo estimates below are unbiased (temperature 1 and top_p 1 only).
- per level (``all``, ``members``, ``non_members``: the view's labels, ``plan.labels(view.label_source)``; a
  null target's "members" are its label source's; ``held_out``: candidates the target never trained on, by its
  meta.json's record_ids, else its non-members, all candidates for a null target):
  * ``kl``: KL(target || base) estimated on the target's own stored samples, both models scoring every token
    (``logp__<target>.npz``, ``logp__base.npz``): ``per_token`` = sum over sampled tokens of
    (log p_target - log p_base) / number of tokens (nats/token), ``per_sequence`` = the mean over trajectories of
    that sum (nats/sequence). Sign: > 0 when the target prefers its samples over the base, as a KL does.
  * ``entropy``: -sum log p_target / number of tokens (nats/token) and -mean per-trajectory sum (nats/sequence):
    the Monte-Carlo estimate of the target's entropy.
    Both estimates are E_{y ~ sampler}[...]: they equal KL(target || base) and H(target) only when the sampler is
    the target itself, i.e. temperature 1 and top_p 1 (``sampling.unbiased``; the card flags other settings).
    Trajectories with a NaN log-prob (a model that did not score them) are left out and counted.
  * ``samples``: mean length in tokens, fraction of zero-length trajectories, fraction at the token cap
    (``max_new_tokens``), fraction whose decoded text is blank, the mean over records of (distinct
    trajectories / trajectories): a degenerate target emits one sample whatever it is asked; and ``seq_rep_4``,
    the mean over trajectories of 1 - distinct 4-grams / 4-grams of its token ids (seq-rep-n, Welleck et al. 2020):
    a target stuck in a loop ("Clinical note for patient X: Clinical note for patient X: ...") scores near 1,
    fluent 48-token text near 0. At DEGENERATE_REPETITION or more the summary line says the samples loop.
  * ``quality``: task quality of the decoded samples (the run's tokenizer, study.yaml's base_model; special
    tokens skipped, as leakaudit.literalness.sample_literalness decodes), by domain through ``QUALITY``: math
    final-answer match, medical label match, code similarity to the canonical body and parse check (definitions
    in ``QUALITY``). Mean over records of the mean over a record's samples. The headline is ``held_out``: records
    the target never trained on. A domain without a measure gets None and a reason.
  The base model's task quality is not available: its samples are not stored (``BASE_QUALITY``); it is not run.
- ``domains``: the same levels pooled over each domain's real (not null) targets.

`realism_card(run_root)` builds the card, `summary_line(card)` one line of it, `card_rows(card)` the report's
table rows, `load(run_root)` reads ``realism.json``.

The parts, one job each, from the bottom: ``definitions`` (levels, thresholds, the definitions written into the
card), ``rounding``, ``estimates`` (KL and entropy), ``samples`` (sample statistics), ``math_quality`` /
``medical_quality`` / ``code_quality`` (one domain's measure each), ``quality`` (the per-domain table),
``by_level`` (a level's summary), ``tokenizer`` (decoding the samples), ``target`` (one target's entry), ``card``
(the whole card, and reading realism.json back) and ``summary`` (the report's rows and the log line).
"""

from leakaudit.realism.by_level import level_summary, levels
from leakaudit.realism.card import load, realism_card
from leakaudit.realism.code_quality import code_similarity, parses_as_python
from leakaudit.realism.definitions import (BASE_QUALITY, DEFINITIONS, DEGENERATE_REPETITION, ESTIMATE_NOTE, LEVELS,
                                           REPEAT_N)
from leakaudit.realism.estimates import entropy_estimate, kl_estimate
from leakaudit.realism.math_quality import (answer_forms, answers_agree, as_number, extract_final_answer,
                                            final_answer_match, normalise_answer)
from leakaudit.realism.medical_quality import label_match, named_label
from leakaudit.realism.quality import QUALITY, QualityMeasure, quality_summary
from leakaudit.realism.samples import distinct_fraction, sample_stats, seq_rep
from leakaudit.realism.summary import QUALITY_HEADLINE, card_rows, summary_line
from leakaudit.realism.target import sampling_info, target_card, target_rows, training_set

__all__ = ["BASE_QUALITY", "DEFINITIONS", "DEGENERATE_REPETITION", "ESTIMATE_NOTE", "LEVELS", "QUALITY",
           "QUALITY_HEADLINE", "REPEAT_N", "QualityMeasure", "answer_forms", "answers_agree", "as_number",
           "card_rows", "code_similarity", "distinct_fraction", "entropy_estimate", "extract_final_answer",
           "final_answer_match", "kl_estimate", "label_match", "level_summary", "levels", "load", "named_label",
           "normalise_answer", "parses_as_python", "quality_summary", "realism_card", "sample_stats",
           "sampling_info", "seq_rep", "summary_line", "target_card", "target_rows", "training_set"]
