"""Grouping rows into forwards: index batches bounded by rows and by padded tokens, for plain and for
prefix-shared scoring."""

from __future__ import annotations

from typing import Any, Sequence


def length_batches(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches, longest first, each with <= max_rows rows and rows*longest <= max_tokens.

    lengths: [S] sequence lengths. Returns a list of index lists covering range(S) exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= max_rows or (len(current) + 1) * longest > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def prefix_batches(prefix_lens: Sequence[int], cont_lens: Sequence[int], keys: Sequence[Any], max_rows: int,
                   max_tokens: int) -> list[list[int]]:
    """Batches for prefix-shared scoring: rows ordered by (longest prefix first, prefix key, longest continuation
    first), so the rows of one prefix stay together and a batch spans groups only where they fit. A batch holds
    <= max_rows rows and rows * (longest prefix + longest continuation) <= max_tokens (a row alone may exceed it).

    prefix_lens, cont_lens, keys: [S] (keys: any sortable identity of the prefix, e.g. its id tuple).
    Returns index lists covering range(S) exactly once.
    """
    order = sorted(range(len(prefix_lens)), key=lambda i: (-prefix_lens[i], keys[i], -cont_lens[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_p = longest_c = 0
    for i in order:
        p, c = max(longest_p, prefix_lens[i]), max(longest_c, cont_lens[i])
        if current and (len(current) >= max_rows or (len(current) + 1) * (p + c) > max_tokens):
            batches.append(current)
            current, p, c = [], prefix_lens[i], cont_lens[i]
        current.append(i)
        longest_p, longest_c = p, c
    if current:
        batches.append(current)
    return batches
