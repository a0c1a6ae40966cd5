"""Table cells and the plain-text table every other module draws with."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "NAN",
    "cpu_cells",
    "event_text",
    "ms",
    "ms_ci",
    "ms_with_ci",
    "num",
    "pct_cell",
    "plain_table",
    "rich_table",
    "stat_cells",
    "text_table",
    "with_ci",
    "zero_cell",
]


def num(v: Any) -> str:
    """A number for a table cell: 3 significant-ish digits, thousands separated, ``—`` for NaN/None."""
    if v is None:
        return "—"
    v = float(v)
    if v != v:  # NaN
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def text_table(
    title: str,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[str]],
    *,
    width: int = 400,
) -> str:
    """A rich-style table rendered to plain text (no colour, trailing spaces stripped).

    ``columns`` are ``(header, "left" | "right")``. Every string (title,
    headers, cells) is plain text, never rich markup: a label such as
    ``test_encode[json]`` prints as it is. A table that fits ``width`` with
    one-line cells is drawn here directly, in time linear in its cells (rich
    takes ~1 ms a row); any other is drawn by rich, which wraps cells.
    """
    body = [["" if cell is None else str(cell) for cell in row] for row in rows]
    fast = plain_table(title, columns, body, width)
    return fast if fast is not None else rich_table(title, columns, body, width)


def rich_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], width: int
) -> str:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), title_justify="left")
    for header, justify in columns:
        t.add_column(Text(header), justify=justify)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(Text(cell) for cell in row))
    return _printed(t, width)


def _printed(renderable: Any, width: int) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


def plain_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], width: int
) -> str | None:
    """The table rich draws (heavy head box, one space of padding), or None when rich must wrap it."""
    from rich.cells import cell_len
    from rich.text import Text

    heads = [h for h, _ in columns]
    cells = [heads, *rows]
    if any("\n" in c or "\r" in c for row in cells for c in row):
        return None
    widths = [max(cell_len(row[j]) for row in cells) for j in range(len(columns))]
    total = sum(widths) + 3 * len(widths) + 1
    if total > width or any(len(row) != len(columns) for row in rows):
        return None

    def line(row: Sequence[str], edge: str, sep: str) -> str:
        parts = []
        for (_, justify), w, c in zip(columns, widths, row, strict=True):
            if justify == "right":
                c = c.rstrip()  # as rich justifies
                parts.append(f" {' ' * (w - cell_len(c))}{c} ")
            else:
                parts.append(f" {c}{' ' * (w - cell_len(c))} ")
        return (edge + sep.join(parts) + edge).rstrip()

    def rule(left: str, fill: str, cross: str, right: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + right

    out = [_printed(Text(title, justify="left"), total)] if title else []
    out += [rule("┏", "━", "┳", "┓"), line(heads, "┃", "┃"), rule("┡", "━", "╇", "┩")]
    out += [line(row, "│", "│") for row in rows]
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out)


def event_text(ev: Mapping[str, Any]) -> str:
    """One cache event (``what``, ``hit``, ``seconds``, ``path``) as a phrase."""
    if ev.get("shipped"):
        state = "shipped"
    elif ev.get("hit"):
        state = "hit"
    else:
        state = "miss (computed and stored)"
    out = f"{ev.get('what', '?')}: {state}"
    secs = ev.get("seconds")
    if isinstance(secs, (int, float)):
        out += f" in {secs:.2f}s"
    if ev.get("note"):
        out += f" ({ev['note']})"
    if ev.get("path"):
        out += f" [{ev['path']}]"
    return out


def with_ci(value: Any, ci: Sequence[float] | None) -> str:
    """``186 ±3%``: a value and half its interval's width relative to it (the value alone without one)."""
    text = num(value)
    if value is None or not ci or ci[0] is None or ci[1] is None:
        return text
    lo, hi, v = float(ci[0]), float(ci[1]), float(value)
    if not v or lo != lo or hi != hi:
        return text
    return f"{text} ±{100 * (hi - lo) / 2 / abs(v):.0f}%"


def stat_cells(stats: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    return [with_ci(stats.get(f"{n}_us"), stats.get(f"{n}_us_ci")) for n in names]


def cpu_cells(stats: Mapping[str, Any]) -> list[str]:
    pct, share = stats.get("cpu_pct"), stats.get("cpu_share")
    return [
        num(stats.get("cpu_mean_us")),
        "—" if pct is None or pct != pct else f"{pct:.0f}%",
        "—" if share is None or share != share else f"{100 * share:.1f}%",
    ]


NAN = float("nan")


def ms(us: Any) -> str:
    return "—" if us is None else num(float(us) / 1e3)


def ms_ci(rec: Mapping[str, Any], key: str) -> str:
    """``rec[key_us]`` in ms with its interval ``rec[key_us_ci]`` (see :func:`ms_with_ci`)."""
    return ms_with_ci(rec.get(f"{key}_us"), rec.get(f"{key}_us_ci"))


def ms_with_ci(us: float | None, ci: Sequence[float] | None) -> str:
    """A time in µs shown in ms with its interval (``—`` when not measured)."""
    if us is None:
        return "—"
    return with_ci(float(us) / 1e3, [c / 1e3 for c in ci] if ci else None)


def pct_cell(share: Any) -> str:
    return "—" if share is None or share != share else f"{100 * share:.0f}%"


def zero_cell(count: int | None, per_query: Sequence[float] | None) -> str:
    """``4 / 120``: queries (requests) that found none of the true top k, of all measured.

    ``count`` is the record's ``recall_zero``; records written before it carried
    one are counted from their per-query recalls; ``—`` when neither is there.
    """
    if per_query is None:
        return "—" if count is None else f"{count:,}"
    zero = count if count is not None else sum(1 for v in per_query if v == 0)
    return f"{zero:,} / {len(per_query):,}"
