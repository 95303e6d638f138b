"""The attack registry and its runner: the ONE place that enforces an attack's output contract.

    @register("loss", NoParams, needs=("fixed_target",), family="fixed", description="...")
    def loss(inputs: AttackInputs, params: NoParams) -> np.ndarray: ...

    run_attack("loss", inputs)                    # default parameters
    run_attack("leaky", inputs, {"slope": 0.0})   # a dict (e.g. from study.yaml) ...
    run_attack("leaky", inputs, LeakyParams(slope=0.0))  # ... or the dataclass itself

`run_attack` resolves the parameters (unknown keys and out-of-range values raise AttackConfigError), checks that
the attack's declared needs are present (AttackInputError naming the missing field), validates those fields, runs
the attack on a copy of the inputs that holds only those fields (and record_ids; every other field is None,
so `labels` reaches only an attack that declares it) and checks its output: a float64 ndarray of shape [N]
with no infinities (NaN allowed, see attacks/base.py). Every attack declares at registration that it returns
higher = more likely member; the runner never flips a sign, and refuses to register an attack that says
otherwise.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from attacks.base import INPUT_FIELDS, AttackInputs
from attacks.errors import AttackConfigError, AttackContractError, AttackInputError

FAMILIES = ("fresh", "fixed", "blind")
THREAT_MODELS = ("OUT-only", "IN+OUT", "check")
"""What an attack's adversary holds. OUT-only: references trained without the candidate, or none (what an auditor
can have); IN+OUT: references trained ON the candidate as well (online LiRA / RMIA, a stronger adversary); check:
reads the membership labels (the blind text baseline), not an attack."""

AttackFn = Callable[[AttackInputs, Any], np.ndarray]


@dataclass(frozen=True)
class ParamInfo:
    """One parameter of an attack, for listings (`leakaudit attacks`)."""

    name: str
    type: str
    default: Any
    doc: str


@dataclass(frozen=True)
class AttackSpec:
    """A registered attack."""

    name: str
    fn: AttackFn
    params_cls: type
    needs: tuple[str, ...]
    """AttackInputs fields the attack reads; run_attack raises AttackInputError when one is None, and passes the attack
    only these (every other field None)."""
    family: str
    """'fresh' (the target's own samples), 'fixed' (the record's reference text), 'blind' (text only)."""
    description: str
    threat_model: str | Callable[[Any], str] = "OUT-only"
    """One of THREAT_MODELS, or a function of the attack's parameters returning one (RMIA: online or offline)."""
    offline_form: tuple[str, dict[str, Any]] | None = None
    """For an attack that can read IN references: (attack name, parameters to set) of its form that reads OUT
    references only, which runs in its place where no reference trained on the candidate (audits, the offline
    design). None: the attack has no such form."""

    def threat_model_of(self, params: Any = None) -> str:
        """The threat model of this attack run with `params` (None: defaults)."""
        tm = self.threat_model
        return tm(self.make_params(params)) if callable(tm) else tm

    @property
    def params(self) -> list[ParamInfo]:
        docs = field_docs(self.params_cls)
        out = []
        for f in dataclasses.fields(self.params_cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out.append(ParamInfo(f.name, type_name, default, docs.get(f.name, "")))
        return out

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def make_params(self, params: Any = None) -> Any:
        """None -> defaults; a mapping -> params_cls(**mapping); an instance of params_cls -> itself."""
        if params is None:
            return self.params_cls()
        if isinstance(params, self.params_cls):
            return params
        if isinstance(params, Mapping):
            known = {f.name for f in dataclasses.fields(self.params_cls)}
            unknown = sorted(set(params) - known)
            if unknown:
                raise AttackConfigError(f"attack {self.name!r}: unknown parameter(s) {unknown}; "
                                  f"known: {sorted(known) or 'none'}")
            return self.params_cls(**params)
        raise AttackConfigError(f"attack {self.name!r}: params must be None, a dict or {self.params_cls.__name__}, "
                          f"got {type(params).__name__}")


_REGISTRY: dict[str, AttackSpec] = {}  # populated by @register at import; the one accepted module-level mutable


def register(name: str, params_cls: type, *, needs: tuple[str, ...], family: str, description: str,
             threat_model: str | Callable[[Any], str] = "OUT-only",
             offline_form: tuple[str, dict[str, Any]] | None = None,
             higher_is_member: bool = True) -> Callable[[AttackFn], AttackFn]:
    """Register `fn(inputs, params) -> float64 [N]` under `name`.

    threat_model: one of THREAT_MODELS, or a function of the parameters returning one; declared with the attack,
    the one place that says which references it reads. offline_form: (name, parameters to set) of the form that
    reads OUT references only (AttackSpec.offline_form).

    higher_is_member must be True: an attack whose natural statistic is member-low negates it itself, so the
    sign lives next to the statistic's definition and nowhere else.
    """
    if not higher_is_member:
        raise AttackConfigError(f"attack {name!r}: attacks must return higher = more likely member; negate inside "
                          "the attack")
    if family not in FAMILIES:
        raise AttackConfigError(f"attack {name!r}: family must be one of {FAMILIES}, got {family!r}")
    bad = [n for n in needs if n not in INPUT_FIELDS]
    if bad:
        raise AttackConfigError(f"attack {name!r}: needs unknown AttackInputs field(s) {bad}")
    if not dataclasses.is_dataclass(params_cls):
        raise AttackConfigError(f"attack {name!r}: params_cls must be a dataclass")
    if not callable(threat_model) and threat_model not in THREAT_MODELS:
        raise AttackConfigError(f"attack {name!r}: threat_model must be one of {THREAT_MODELS}, got {threat_model!r}")

    def deco(fn: AttackFn) -> AttackFn:
        if name in _REGISTRY:
            raise AttackConfigError(f"attack {name!r} is already registered")
        _REGISTRY[name] = AttackSpec(name, fn, params_cls, tuple(needs), family, description, threat_model,
                                     offline_form)
        return fn

    return deco


def unregister(name: str) -> None:
    """Remove an attack (tests register deliberately broken attacks and remove them afterwards)."""
    _REGISTRY.pop(name, None)


def get_attack(name: str) -> AttackSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AttackConfigError(f"unknown attack {name!r}; registered: {sorted(_REGISTRY)}") from None


def list_attacks() -> list[AttackSpec]:
    """Every registered attack, sorted by family then name."""
    return sorted(_REGISTRY.values(), key=lambda s: (FAMILIES.index(s.family), s.name))


def run_attack(name: str, inputs: AttackInputs, params: Any = None) -> np.ndarray:
    """Run a registered attack; float64 [N], higher = more likely member, NaN for records with no tokens."""
    spec = get_attack(name)
    p = spec.make_params(params)
    missing = inputs.missing(spec.needs)
    if missing:
        raise AttackInputError(f"attack {name!r} needs {missing}, which these inputs do not have", field=missing[0])
    view = only_needs(inputs, spec.needs)
    view.validate(spec.needs)
    out = spec.fn(view, p)
    if not isinstance(out, np.ndarray):
        raise AttackContractError(f"attack {name!r} returned {type(out).__name__}, not a numpy array")
    if out.dtype != np.float64:
        raise AttackContractError(f"attack {name!r} returned dtype {out.dtype}, expected float64")
    if out.shape != (inputs.n,):
        raise AttackContractError(f"attack {name!r} returned shape {out.shape}, expected ({inputs.n},)")
    if np.isinf(out).any():
        raise AttackContractError(f"attack {name!r} returned infinite scores for "
                                  f"{[inputs.record_ids[i] for i in np.flatnonzero(np.isinf(out))[:5]]}")
    return out


def only_needs(inputs: AttackInputs, needs: tuple[str, ...]) -> AttackInputs:
    """A shallow copy of `inputs` with every field outside `needs` set to None (record_ids always kept).

    What an attack does not declare, it cannot read: in particular only an attack that declares `labels`
    (blind_text) ever sees the membership labels.
    """
    return dataclasses.replace(inputs, **{f: None for f in INPUT_FIELDS if f not in needs})


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string literal after each field), read from its source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
