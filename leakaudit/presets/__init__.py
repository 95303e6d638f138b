"""The shipped study presets, one YAML file each; `preset_names` is the one list of them (the CLI's help and the
config loader both read it; importing this module pulls in nothing else, so `--help` stays fast)."""

from __future__ import annotations

from importlib import resources


def preset_names() -> tuple[str, ...]:
    """Every `<name>.yaml` in this package, `default` first, then alphabetical."""
    names = sorted(f.name[:-5] for f in resources.files(__name__).iterdir() if f.name.endswith(".yaml"))
    return tuple(sorted(names, key=lambda n: n != "default"))
