"""What a report build shows while it runs: one line per finished step with its elapsed time, and on a terminal a
bar over the steps as well.

    steps = ReportSteps(sys.stderr)             # a bar only when the stream is a terminal
    steps.begin(7)
    with steps.step("metrics: 1000 bootstrap resamples") as tick:
        ...                                      # tick() after each unit of a long step (shown in the bar)
    steps.end()

Lines read `[report] metrics: 1000 bootstrap resamples done in 7.2 s`, the study log's stage lines' form, and hold
no terminal escape codes, so a log file gets one clean line per step; the bar (tqdm) is drawn only on a terminal
(`bar=None`: whether the stream is one). ReportSteps.silent() shows nothing, for library calls.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator, TextIO

from tqdm.auto import tqdm


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class ReportSteps:
    """The steps of one report build as they finish, on `stream` (default stderr). enabled=False: nothing at all."""

    def __init__(self, stream: TextIO | None = None, *, bar: bool | None = None, enabled: bool = True):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.draw_bar = enabled and (_is_terminal(self.stream) if bar is None else bar)
        self.bar: tqdm | None = None
        self.times: dict[str, float] = {}
        self._started = time.monotonic()

    @classmethod
    def silent(cls) -> "ReportSteps":
        return cls(enabled=False)

    def begin(self, total: int) -> None:
        """Start the clock (and the bar, on a terminal) for `total` steps."""
        self._started = time.monotonic()
        if self.draw_bar:
            self.bar = tqdm(total=total, desc="report", unit="step", file=self.stream, leave=False)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Callable[[], None]]:
        """Time one step; yields tick(), which counts units of the step in the bar's text (no line)."""
        start, done = time.monotonic(), [0]
        if self.bar is not None:
            self.bar.set_description_str(f"report: {name}")

        def tick() -> None:
            done[0] += 1
            if self.bar is not None:
                self.bar.set_postfix_str(f"{done[0]} done")

        try:
            yield tick
        except BaseException:
            self._close_bar()  # the error's message then starts on a clean line
            raise
        self.times[name] = elapsed = time.monotonic() - start
        self._line(f"[report] {name} done in {elapsed:.1f} s")
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.update(1)

    def end(self) -> float:
        """Close the bar and write the total line; returns the seconds since begin()."""
        total = time.monotonic() - self._started
        self._close_bar()
        self._line(f"[report] built in {total:.1f} s")
        return total

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)
