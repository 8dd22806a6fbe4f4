"""Late source rows for the replace tests: rows whose ``recorded_at`` falls in a window that was
already delivered, as a late write makes them."""

from __future__ import annotations

from typing import Any

from seqexport_dagster.contract.window import Window, iso_ms


def late_rows(window: Window, n: int, tag: str) -> list[tuple[Any, ...]]:
    """Email rows carrying a ``recorded_at`` in the last minutes of ``window``, written late."""
    return [
        (
            "acme", f"eev_{tag}_{i:04d}", "delivered", iso_ms(window.to_ms - 60_000 * (i + 1)),
            iso_ms(window.to_ms - 60_000 * (i + 1)), "sub_acme_0000001", "late@example.com", None, None,
            f"msg_{tag}_{i}", "Late", None, None, None, None, None,
        )
        for i in range(n)
    ]  # fmt: skip
