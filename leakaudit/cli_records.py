"""What `leakaudit records` does besides loading a source: read its `--option key=value` pairs, and check a file's
records as run-study checks them (leakaudit.data.admit)."""

from __future__ import annotations

from pathlib import Path

from leakaudit.errors import InputError


def parse_options(options: list[str]) -> dict:
    """`--option key=value` pairs; each value is plain YAML (python tags and other non-standard tags refused)."""
    import yaml

    out = {}
    for o in options:
        k, sep, v = o.partition("=")
        if not sep or not k.strip():
            raise InputError(f"--option expects key=value, got {o!r}")
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            problem = " ".join(str(getattr(e, "problem", None) or e).split())
            raise InputError(f"--option {k.strip()}: the value {v!r} is not plain YAML ({problem}); quote it to "
                             "pass a string") from e
    return out


def admit_file_records(recs: list, options: dict, *, config: Path | None, preset: str | None,
                       whole_file: bool) -> None:
    """The study's checks of a file's records (leakaudit.data.admit): one domain, within the token budget."""
    from leakaudit.config import load_config
    from leakaudit.data.admit import admit
    from leakaudit.data.user_files import record_lines
    from leakaudit.models import load_tokenizer

    cfg = load_config(config, preset=preset)
    path = str(options["path"])
    domain = options.get("domain") or recs[0].domain
    configured = "--option domain" if options.get("domain") else "this file (its first record's domain)"
    admit(recs, source="file", domain=domain, configured=configured, data=cfg.data, where=path,
          tokenizer=load_tokenizer(cfg.base_model, trust_remote_code=cfg.trust_remote_code),
          lines=record_lines(path) if whole_file else None)
