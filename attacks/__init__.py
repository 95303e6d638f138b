"""Membership-inference attacks over stored signals: pure numpy, one module per attack, one registry.

    from attacks import AttackInputs, list_attacks, run_attack
    scores = run_attack("leaky", inputs, {"slope": 0.1})   # float64 [N], higher = more likely member

Importing this package registers every attack. See attacks/base.py for shapes and the NaN policy,
attacks/registry.py for the runner's contract and attacks/errors.py for what the package raises. The package
imports nothing of leakaudit's.
"""

from attacks.base import AttackInputs, FreshParams, NoParams, params_dict
from attacks.errors import AttackConfigError, AttackContractError, AttackError, AttackInputError
from attacks.registry import AttackSpec, ParamInfo, get_attack, list_attacks, register, run_attack, unregister

# Each import registers its attacks (order does not matter).
from attacks import (blind_text, fresh_gap, fresh_loss, leaky, lira, loss, min_k, min_k_plus_plus,  # noqa: E402,F401
                     ref_ratio, rmia, zlib_entropy)

__all__ = ["AttackInputs", "AttackSpec", "AttackError", "AttackConfigError", "AttackContractError", "AttackInputError",
           "FreshParams", "NoParams", "ParamInfo", "get_attack", "list_attacks", "params_dict", "register", "run_attack",
           "unregister"]
