"""Which records each optimizer step sees, and the seed each step samples with; both derived from the seed only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Step:
    """One optimizer step: its index, its epoch, and the positions (into the record list) it trains on."""

    index: int
    epoch: int
    positions: tuple[int, ...]


def plan_steps(n_records: int, epochs: int, batch_size: int, seed: int) -> list[Step]:
    """Every epoch visits each record once, in a permutation drawn from (seed, epoch); the last batch of an
    epoch may be smaller. Reproducible and independent of anything but the arguments."""
    steps: list[Step] = []
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(n_records)
        for start in range(0, n_records, batch_size):
            steps.append(Step(len(steps), epoch, tuple(int(i) for i in order[start:start + batch_size])))
    return steps


def step_seed(seed: int, step: int, process_index: int = 0) -> int:
    """A 31-bit seed for one step's sampling on one process (distinct across steps and processes)."""
    return int(np.random.SeedSequence([seed, step, process_index]).generate_state(1)[0] & 0x7FFFFFFF)


def record_seed(seed: int, step: int, position: int) -> int:
    """A 31-bit seed for the rollout of the record at `position` of one step's batch: the same whichever process
    samples it (OPDConfig.rollout_seeding 'record'); a spawned key, so it never equals a step_seed."""
    return int(np.random.SeedSequence([seed, step], spawn_key=(position,)).generate_state(1)[0] & 0x7FFFFFFF)
