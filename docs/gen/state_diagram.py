"""The lifecycle diagram, drawn from ``toolops.runtime.states.TRANSITIONS`` as an SVG.

Every edge of the table is drawn and nothing else, so the picture cannot disagree with the code.
Only the layout is written here: a grid position per state (a state without one fails the
build). No Graphviz, no JavaScript: the docs build and read offline.
"""
from __future__ import annotations

from html import escape

from toolops.runtime.states import TERMINAL, TRANSITIONS, State

S = State
# (column, row): the happy path down the left, each way out to the right of the state it leaves.
POSITION = {
    S.PROPOSED: (0, 0), S.PARSED: (0, 1), S.VALIDATED: (0, 2), S.AUTHORIZED: (0, 3), S.PREPARED: (0, 4),
    S.EXECUTING: (0, 5), S.COMMITTED: (0, 6), S.OBSERVED: (0, 7),
    S.PARSE_REJECTED: (1, 0.5), S.VALIDATION_REJECTED: (1, 1.5), S.AUTHORIZATION_REJECTED: (1, 2.5),
    S.CANCELLED_BEFORE_COMMIT: (1, 3.6), S.FAILED_BEFORE_COMMIT: (1, 4.5), S.OUTCOME_UNKNOWN: (1, 5.5),
    S.FAILED_AFTER_COMMIT: (1, 6.6),
}
# Edges that skip a state of the happy path run round it on the left; the two edges between
# EXECUTING and OUTCOME_UNKNOWN bend apart (the curve's control point moves by dx, dy pixels).
AROUND_THE_LEFT = {(S.AUTHORIZED, S.EXECUTING), (S.EXECUTING, S.OBSERVED)}
BEND = {(S.EXECUTING, S.OUTCOME_UNKNOWN): (-6, 16), (S.OUTCOME_UNKNOWN, S.EXECUTING): (6, -16)}

BOX_W, BOX_H, COL_W, ROW_H, MARGIN, TOP = 196, 30, 250, 50, 12, 0
COLOURS = {"happy": "#e8f0fe", "terminal": "#fdecea", "open": "#fff4e5"}


def state_diagram_svg() -> str:
    missing = set(TRANSITIONS) - set(POSITION)
    if missing:
        raise ValueError(f"docs/gen/state_diagram.py has no position for {sorted(missing)}")
    columns, rows = max(c for c, _ in POSITION.values()), max(r for _, r in POSITION.values())
    width = int(MARGIN * 2 + COL_W * columns + BOX_W + 40)  # room on the left for the bent edges
    height = int(MARGIN * 2 + TOP + ROW_H * rows + BOX_H)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="The states of a call and every allowed transition" font-family="sans-serif" font-size="12">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>']
    for src, targets in TRANSITIONS.items():
        for dst in sorted(targets):
            parts.append(_edge(src, dst))
    for state in TRANSITIONS:
        parts.append(_box(state))
    parts.append("</svg>\n")
    return "\n".join(parts)


def _centre(state: State) -> tuple[float, float]:
    col, row = POSITION[state]
    return MARGIN + 40 + col * COL_W + BOX_W / 2, MARGIN + TOP + row * ROW_H + BOX_H / 2


def _box(state: State) -> str:
    x, y = _centre(state)
    kind = "terminal" if state in TERMINAL and state != S.OBSERVED else (
        "happy" if POSITION[state][0] == 0 else "open")
    return (f'<g><rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
            f'fill="{COLOURS[kind]}" stroke="#555"/><text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle">'
            f'{escape(state.value)}</text></g>')


def _edge(src: State, dst: State) -> str:
    (x1, y1), (x2, y2) = _centre(src), _centre(dst)
    start, end = _border(x1, y1, x2, y2), _border(x2, y2, x1, y1)
    bend = BEND.get((src, dst))
    if (src, dst) in AROUND_THE_LEFT:
        left = x1 - BOX_W / 2
        path = f"M {left:.0f} {y1:.0f} Q {left - 60:.0f} {(y1 + y2) / 2:.0f} {left:.0f} {y2:.0f}"
    elif bend:
        mx, my = (start[0] + end[0]) / 2 + bend[0], (start[1] + end[1]) / 2 + bend[1]
        path = f"M {start[0]:.0f} {start[1]:.0f} Q {mx:.0f} {my:.0f} {end[0]:.0f} {end[1]:.0f}"
    else:
        path = f"M {start[0]:.0f} {start[1]:.0f} L {end[0]:.0f} {end[1]:.0f}"
    return (f'<path d="{path}" fill="none" stroke="#444" stroke-width="1.2" marker-end="url(#arrow)">'
            f'<title>{src.value} → {dst.value}</title></path>')


def _border(x: float, y: float, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from a box's centre towards a point leaves the box."""
    dx, dy = towards_x - x, towards_y - y
    if dx == 0 and dy == 0:
        return x, y
    scale = min((BOX_W / 2) / abs(dx) if dx else float("inf"), (BOX_H / 2) / abs(dy) if dy else float("inf"))
    return x + dx * scale, y + dy * scale
