"""The dry run's printout of a study's cost, and the one duration formatter of leakaudit's time estimates."""

from __future__ import annotations

from leakaudit.cost.estimate import StudyCost
from leakaudit.cost.gpu import GPUClass
from leakaudit.cost.rates import CostRates


def format_plan(cost: StudyCost, here: dict[str, float] | None, rates: CostRates | None, gpu: GPUClass,
                on_gpu: dict[str, float], utilisation: tuple[float, float]) -> str:
    """The dry run's printout."""
    lines = [f"models to train: {sum(cost.models.values())} "
             f"({', '.join(f'{v} {k}' for k, v in cost.models.items() if v)}); base {cost.shape.params / 1e6:.0f}M "
             f"parameters; OPD steps: {cost.opd_steps}"]
    for dom, ln in cost.lengths.items():
        lines.append(f"  {dom}: mean tokens per record: prompt {ln.prompt:.0f}, teacher context "
                     f"{ln.teacher_context:.0f}, reference {ln.reference:.0f} "
                     f"({'measured on the records' if ln.measured else 'token budgets: upper bounds'})")
    lines.append(f"{'stage':10s} {'jobs':>5s} {'PFLOP':>9s} {'peak GB/job':>12s} {'here':>10s} "
                 f"{'one ' + gpu.name:>12s}   tokens (M)")
    for s, c in cost.stages.items():
        if not c.flops:
            continue
        toks = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in c.tokens.items())
        h = duration_text(here[s]) if here is not None else "?"
        lines.append(f"{s:10s} {c.jobs:5d} {c.flops / 1e15:9.3f} {c.peak_bytes / 1e9:12.1f} {h:>10s} "
                     f"{duration_text(on_gpu[s]):>12s}   {toks}")
    if here is not None:
        lines.append(f"total here: {duration_text(sum(here.values()))} (rates measured on {rates.machine}, {rates.source})")
    else:
        lines.append("total here: no stored rates for this machine")
    lines.append(f"total on one {gpu.name}: {duration_text(sum(on_gpu.values()))} (dense work at {utilisation[0]:.0%} of "
                 f"{gpu.bf16_flops / 1e12:.0f} TFLOP/s bf16, decoding at {utilisation[1]:.0%} of "
                 f"{gpu.bandwidth / 1e12:.2f} TB/s; model loading not counted; students and targets are independent jobs: "
                 f"divide by the GPUs)")
    lines.append("rollouts and trajectories are counted at their token caps: an upper bound where EOS ends them early")
    return "\n".join(lines)


def duration_text(seconds: float) -> str:
    """A duration for a printout ('45 s', '12.5 min', '1.3 h')."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
