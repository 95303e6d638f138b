"""What makes a dataclass a section of the study config (leakaudit.config validates the whole with pydantic).

A section sets ``__pydantic_config__ = FORBID``, so unknown keys are refused wherever they appear, and a field that
holds another section is typed ``Checked[Section]``, so the range errors that section's ``__post_init__`` raises
(ConfigError) are reported at the field's dotted location. Fields typed StrictBool / StrictInt refuse the other
(pydantic's lax mode reads ``seed: true`` as 1 and ``trust_remote_code: 1`` as True); YAML, files and --set values
alike, gives real ints and bools, so they load.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, WrapValidator
from pydantic_core import PydanticCustomError

from leakaudit.errors import ConfigError

FORBID = ConfigDict(extra="forbid")
"""A section's ``__pydantic_config__``: unknown keys are an error."""


def _located(value: Any, handler: Any) -> Any:
    """Pydantic wrap validator: a section's own ConfigError (from its __post_init__) becomes a validation error at
    the section's location, so the message can name it (pydantic only collects ValueError/AssertionError)."""
    try:
        return handler(value)
    except (ConfigError, TypeError) as e:
        raise PydanticCustomError("config", "{message}", {"message": str(e)}) from None


_T = TypeVar("_T")
Checked = Annotated[_T, WrapValidator(_located)]
"""`Checked[Section]`: a section dataclass whose range-check errors are reported at its dotted location."""
