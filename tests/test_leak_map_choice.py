"""Which record the leak map draws (leakaudit.scoring.leak_map_choice), on hand-made score rows."""

import numpy as np
import pandas as pd

from leakaudit.scoring import SELECTED_CANDIDATE, SELECTED_MEMBER, leak_map_choice


def rows(scores: dict[str, float], labels: dict[str, float], attack: str = "leaky") -> pd.DataFrame:
    return pd.DataFrame({"record_id": list(scores), "attack": attack, "attack_name": "leaky",
                         "score": list(scores.values()), "is_member": [labels[r] for r in scores]})


def test_with_labels_the_highest_scoring_member_not_a_higher_non_member():
    r = rows({"a": 0.9, "b": 0.4, "c": 0.6, "d": np.nan}, {"a": 0.0, "b": 1.0, "c": 1.0, "d": 1.0})
    assert leak_map_choice(r, "leaky") == (0.6, "c", SELECTED_MEMBER)


def test_an_audit_without_labels_names_the_top_candidate_as_a_candidate():
    # before: rows.is_member.astype(bool) read NaN as True, so an unlabelled candidate was drawn as "the most leaking
    # member"; now it is drawn, and named, as the top candidate
    r = rows({"a": 0.2, "b": 0.7}, {"a": np.nan, "b": np.nan})
    assert leak_map_choice(r, "leaky") == (0.7, "b", SELECTED_CANDIDATE)


def test_only_the_named_leaky_variant_is_read_and_none_when_nothing_is_left():
    headline = rows({"a": 0.3, "b": 0.5}, {"a": 1.0, "b": 1.0})
    variant = rows({"a": 5.0, "b": 9.0}, {"a": 1.0, "b": 1.0}, attack="leaky_topk")  # another scale
    both = pd.concat([headline, variant], ignore_index=True)
    assert leak_map_choice(both, "leaky") == (0.5, "b", SELECTED_MEMBER)
    assert leak_map_choice(rows({"a": 0.3}, {"a": 0.0}), "leaky") is None  # no member among the labelled rows
    assert leak_map_choice(rows({"a": np.nan}, {"a": 1.0}), "leaky") is None  # no scored row
