"""attacks/ raises its own errors (attacks.errors); the pipeline turns each into its user-facing error with the same
message, so bad input to an attack still ends in one line naming the record and field and exit code 2."""

from __future__ import annotations

import numpy as np
import pytest

from attacks import AttackInputs
from attacks.errors import AttackConfigError, AttackContractError, AttackInputError
from leakaudit.attack_errors import user_error, user_errors_from_attacks
from leakaudit.errors import ConfigError, InputError, LeakauditError


def test_an_attack_input_error_reads_as_the_pipelines_input_error():
    raised = AttackInputError("has non-finite values", record_id="r7", field="fixed_target")
    error = user_error(raised)
    assert type(error) is InputError
    assert (error.record_id, error.field) == ("r7", "fixed_target")
    assert str(error) == str(raised) == "record r7, field 'fixed_target': has non-finite values"
    assert str(user_error(AttackInputError("no field named"))) == "no field named"


@pytest.mark.parametrize("raised, expected", [
    (AttackConfigError("unknown attack 'nope'"), ConfigError),
    (AttackContractError("attack 'x' returned dtype float32, expected float64"), LeakauditError),
])
def test_other_attack_errors_keep_their_message(raised, expected):
    error = user_error(raised)
    assert type(error) is expected and str(error) == str(raised)


def test_inside_the_guard_an_attack_error_is_raised_as_the_user_error():
    with pytest.raises(ConfigError, match="unknown attack") as caught:
        with user_errors_from_attacks():
            raise AttackConfigError("unknown attack 'nope'")
    assert isinstance(caught.value.__cause__, AttackConfigError)


def test_scoring_an_attack_on_bad_inputs_is_an_input_error_naming_record_and_field():
    from leakaudit.config import AttackSpecConfig
    from leakaudit.scoring import attack_rows

    bad = AttackInputs(record_ids=["a", "b"], texts=["x", "y"], fixed_target=[np.array([-1.0]), np.array([np.nan])])
    with pytest.raises(InputError, match=r"record b, field 'fixed_target'"):
        attack_rows(bad, [AttackSpecConfig("loss")], target="t", domain="d")
    # skip_unavailable: the pipeline's error (not the attack's) is what an unavailable attack is skipped on
    texts_only = AttackInputs(record_ids=list("abcd"), texts=["one", "two", "three", "four"],
                              labels=np.array([1, 0, 1, 0]))
    logged: list[str] = []
    rows = attack_rows(texts_only, [AttackSpecConfig("loss"), AttackSpecConfig("blind_text")], target="t",
                       domain="d", skip_unavailable=True, log=logged.append)
    assert set(rows.attack) == {"blind_text"}
    assert any("skipping loss" in m and "field 'fixed_target'" in m for m in logged), logged
