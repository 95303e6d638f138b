"""One entry of the study config's `attacks` list: an attack by its registered name, with its parameters.

Beside leakaudit.scoring, which runs the configured attacks; validated with the rest of the study config by
leakaudit.config (which re-exports it). The attack registry is imported when an entry is checked, not before (it
loads every attack module).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError


@dataclass
class AttackSpecConfig:
    """One attack to run. Checked at construction: the name is registered and the params are valid for it
    (unknown keys and the params dataclass's range checks raise ConfigError); `params` then holds every
    parameter, defaults spelled out."""

    __pydantic_config__ = FORBID

    name: str
    """A registered attack (`leakaudit attacks`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The attack's parameters (`leakaudit attacks` lists them with their defaults); unset ones take the default."""
    label: str = ""
    """Display name; defaults to the attack name (set it when one attack runs with several params)."""

    def __post_init__(self) -> None:
        from attacks import get_attack, params_dict
        from attacks.errors import AttackConfigError

        try:
            spec = get_attack(self.name)
        except AttackConfigError as e:
            raise ConfigError(f"name: {e}") from None
        known = [f.name for f in dataclasses.fields(spec.params_cls)]
        for key in self.params:
            if key not in known:
                raise ConfigError(f"params.{key}: unknown parameter of attack {self.name!r}; "
                                  f"known: {', '.join(known) or 'none'}")
        try:
            made = spec.make_params(dict(self.params))
        except AttackConfigError as e:
            # the params dataclasses name their field as '<attack>.<field>': point at params.<field> instead
            msg = str(e)
            m = re.match(r"[\w-]+\.(\w+)\b", msg)
            raise ConfigError(f"params.{msg[m.start(1):]}" if m and m.group(1) in known
                              else f"params: {msg}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"params: {e}") from None
        self.params = params_dict(made)

    @property
    def display(self) -> str:
        return self.label or self.name
