"""experiments/record_centring.py: scores less each record's mean over targets, against the pooled AUROC."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from conftest import experiment_script


def test_centring_removes_the_records_own_level_and_skips_nan_rows():
    centred_aurocs = experiment_script("record_centring").centred_aurocs
    # record a sits high on both targets (10 IN, 8 OUT), record b low (1 IN, 0 OUT); a NaN row is left out
    real = pd.DataFrame({"label": "loss", "domain": "math",
                         "record_id": ["a", "a", "b", "b", "c"], "target": ["t0", "t1", "t1", "t0", "t0"],
                         "score": [10.0, 8.0, 1.0, 0.0, math.nan], "is_member": [True, False, True, False, True]})
    row = centred_aurocs(real).iloc[0]
    # raw, (member, non-member) pairs: (10, 8) win, (10, 0) win, (1, 8) loss, (1, 0) win → 3/4
    assert row.rows == 4 and row.auroc == pytest.approx(0.75)
    # centred: a → +1 IN, −1 OUT; b → +0.5 IN, −0.5 OUT: every member above every non-member
    assert row.auroc_record_centred == pytest.approx(1.0)
