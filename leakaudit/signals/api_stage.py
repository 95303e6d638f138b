"""How an audit whose target is an API (leakaudit.signals.api_backend) plugs into the study's stages.

- `check_api_target`: before anything is written: the URL, the served model's name, the API key's variable
  (set when named), and sampling at temperature 1 / top_p 1 (what the target's returned log-probs mean is then
  the same on every server: the model's own distribution).
- `open_api_backend`: the backend, its journal and capabilities.json in the target's fresh-signals directory.
- `sample_fresh_api`: sample_fresh for an API target: records with an unrecoverable trajectory are left out of
  the trajectory store (so no model scores them) and listed, with the reason, in api.json.
- `attack_availability` / `api_summary`: which attacks ran on the API target and why the others did not
  (audit.json's "api" section, the report's "Attacks run / skipped and why").
- `drop_excluded`: the excluded records' rows leave scores.parquet for that target (excluded from every attack,
  so they never count as "lowest score" in a metric).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from leakaudit.audit_options import flag_for
from leakaudit.errors import ConfigError
from leakaudit.io import read_json, write_json
from leakaudit.signals.api_backend import ApiBackend, ApiOptions
from leakaudit.signals.api_client import key_env_name, read_api_key
from leakaudit.signals.types import SamplingConfig

API_JSON = "api.json"
VOCAB_REASON = ("needs the mean and std of log p over the whole vocabulary at every position (Min-K%++); a "
                "completions API returns log-probs of chosen tokens only, never full-vocabulary statistics")
FIXED_REASON = ("needs the target's log-probs of a given text (the record's reference answer); this server "
                "offers no usable prompt log-probs (vLLM prompt_logprobs or echo), see capabilities.notes")


def api_options(audit: Any) -> ApiOptions:
    return ApiOptions(model=audit.target_model, api_key_env=key_env_name(audit.api_key_env),
                      concurrency=audit.api_concurrency, timeout_s=audit.api_timeout_s,
                      max_retries=audit.api_max_retries)


def check_api_target(audit: Any, sampling: SamplingConfig) -> None:
    """ConfigError (exit 2, nothing written) unless the API target can be audited as configured."""
    read_api_key(key_env_name(audit.api_key_env))  # a named variable must be set; its value is not kept
    if sampling.temperature != 1.0 or sampling.top_p != 1.0:
        raise ConfigError(f"signals.sampling: an API target is sampled at temperature 1 and top_p 1 (got "
                          f"{sampling.temperature}, {sampling.top_p}): servers differ in whether the log-probs they "
                          "return are before or after those transforms, and Leaky compares them with the "
                          "references' log-probs of the model's own distribution")
    api_options(audit)


def probe_api_target(audit: Any, tokenizer: Any) -> None:
    """Before any training: one short sampled request reaches the server, is accepted with the key, and comes
    back with the sampled tokens' log-probs (what every attack on an API target reads). ApiError / ConfigError
    (exit 2) naming the target otherwise. Writes nothing; the full probe (ApiBackend.probe) runs at sampling."""
    from leakaudit.signals.api_backend import PROBE_TEXT, api_client
    from leakaudit.signals.api_protocol import ResponseError, choices, completion_logprobs, sample_body

    opts = api_options(audit)
    client = api_client(audit.target, opts)
    prompt = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    answer = client.post("/completions", sample_body(opts.model, prompt, n=1, seed=1234, max_tokens=2))
    try:
        completion_logprobs(choices(answer)[0])
    except ResponseError as e:
        raise ConfigError(f"{flag_for('audit.target')} {audit.target}: the server's answer has no usable sampled "
                          f"log-probs ({e}); an audit of an API target needs them") from None


@contextlib.contextmanager
def open_api_backend(audit: Any, tokenizer: Any, state_dir: str | os.PathLike) -> Iterator[ApiBackend]:
    backend = ApiBackend(audit.target, tokenizer, api_options(audit), state_dir)
    try:
        yield backend
    finally:
        backend.close()
        _add_totals(Path(state_dir) / API_JSON, backend)


def _add_totals(path: Path, backend: ApiBackend) -> None:
    """api.json's "totals": requests sent / answered / retried over every backend opened on this target (the
    sampling pass, the scoring pass, a resumed run's), added as each closes. Only once api.json exists (after
    sampling); the sampling pass's own counts are in its "sent" and "client"."""
    if not path.is_file():
        return
    data = read_json(path)
    totals = data.get("totals", {})
    stats = backend.client.stats.to_dict()
    for key, value in [*(("sent_" + k, v) for k, v in backend.sent.items()),
                       *((k, stats[k]) for k in ("requests", "answered", "retries", "failures"))]:
        totals[key] = totals.get(key, 0) + value
    data["totals"] = totals
    write_json(path, data)


def sample_fresh_api(backend: ApiBackend, tokenizer: Any, records: Sequence[Any], cfg: SamplingConfig,
                     out_dir: str | os.PathLike) -> int:
    """Sample the records' trajectories through the API into out_dir (as leakaudit.signals.stages.sample_fresh
    does, resumable through the journal); records whose token ids could not be recovered are not stored and are
    listed in api.json ("excluded": {record_id: reason}). Returns the number of trajectories stored (0 when out_dir
    already holds them)."""
    from leakaudit.data.records import check_unique
    from leakaudit.prompting import student_prompt_ids
    from leakaudit.signals.stages import already_sampled
    from leakaudit.signals.store import save_trajectories

    check_unique(records)
    out_dir = Path(out_dir)
    ids = [r.record_id for r in records]
    if already_sampled(out_dir, cfg, ids, ids_key="requested_record_ids"):  # excluded records are not stored
        return 0
    start = time.time()
    prompts = [student_prompt_ids(tokenizer, r) for r in records]
    trajs = backend.sample(prompts, cfg, keys=ids)
    excluded = dict(backend.excluded)
    keep = [i for i, rid in enumerate(ids) if rid not in excluded]
    write_json(out_dir / API_JSON, {**backend.report(), "excluded": excluded, "n_requested": len(ids),
                                    "n_excluded": len(excluded)})
    meta = {"config": cfg.to_dict(), "model_ref": backend.model_ref, "served_model": backend.opts.model,
            "record_ids": [ids[i] for i in keep], "requested_record_ids": ids, "excluded": sorted(excluded),
            "seconds": round(time.time() - start, 3), "n_tokens": sum(len(t) for i in keep for t in trajs[i])}
    save_trajectories(out_dir, meta["record_ids"], [trajs[i] for i in keep], meta, prompts=[prompts[i] for i in keep])
    return sum(len(trajs[i]) for i in keep)


def load_api_json(fresh_dir: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(fresh_dir) / API_JSON
    return read_json(path) if path.is_file() else None


def excluded_records(fresh_dir: str | os.PathLike) -> dict[str, str]:
    api = load_api_json(fresh_dir)
    return dict(api.get("excluded", {})) if api else {}


def drop_excluded(scores: Any, target: str, excluded: dict[str, str]) -> Any:
    """scores.parquet rows without the excluded records of `target` (every attack)."""
    if not excluded:
        return scores
    keep = ~((scores.target == target) & scores.record_id.isin(list(excluded)))
    return scores[keep].reset_index(drop=True)


def attack_availability(specs: Sequence[Any], capabilities: dict[str, Any], ran: Sequence[str]) -> dict[str, Any]:
    """{"run": [labels], "skipped": {label: reason}} for the configured attack specs on an API target. `ran`: the
    labels present in scores.parquet for it."""
    from attacks import get_attack

    fixed = capabilities.get("fixed_text_mode") is not None
    run, skipped = [], {}
    for a in specs:
        label = a.label or a.name
        needs = set(get_attack(a.name).needs)
        if label in ran:
            run.append(label)
        elif {"fixed_target_mu", "fixed_target_sigma"} & needs:
            skipped[label] = VOCAB_REASON
        elif not fixed and {"fixed_target", "population_target"} & needs:
            skipped[label] = FIXED_REASON
        else:
            skipped[label] = "its signals are not available in this audit (see the attacks stage log)"
    return {"run": run, "skipped": skipped}


def api_summary(fresh_dir: str | os.PathLike, specs: Sequence[Any], ran: Sequence[str]) -> dict[str, Any] | None:
    """audit.json's "api" section: the endpoint, what the probe found, requests sent / retried, the excluded
    records with reasons, and which attacks ran or were skipped and why. None without api.json."""
    api = load_api_json(fresh_dir)
    if api is None:
        return None
    caps = api.get("capabilities", {})
    return {"base_url": caps.get("base_url"), "model": caps.get("model"), "capabilities": caps,
            "requests": {"sent": api.get("sent"), "client": api.get("client"), "totals": api.get("totals")},
            "n_requested": api.get("n_requested"), "n_excluded": api.get("n_excluded"),
            "excluded": api.get("excluded", {}), "attacks": attack_availability(specs, caps, ran)}
