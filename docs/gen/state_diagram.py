"""The lifecycle diagram, drawn from ``toolops.runtime.states.TRANSITIONS`` as an SVG.

Every edge of the table is drawn and nothing else, so the picture cannot disagree with the code.
Only the layout is written here: a grid position per state (a state without one fails the
build). No Graphviz, no JavaScript: the docs build and read offline.
"""
from __future__ import annotations

from html import escape

from toolops.runtime.states import TERMINAL, TRANSITIONS, State

S = State
# (column, row): the happy path on the top row, each way out below the state it leaves from.
POSITION = {
    S.PROPOSED: (0, 0), S.PARSED: (1, 0), S.VALIDATED: (2, 0), S.AUTHORIZED: (3, 0), S.PREPARED: (4, 0),
    S.EXECUTING: (5, 0), S.COMMITTED: (6, 0), S.OBSERVED: (7, 0),
    S.PARSE_REJECTED: (0.5, 1.3), S.VALIDATION_REJECTED: (1.5, 2.1), S.AUTHORIZATION_REJECTED: (2.5, 1.3),
    S.CANCELLED_BEFORE_COMMIT: (3.8, 2.1), S.OUTCOME_UNKNOWN: (5.5, 1.3), S.FAILED_BEFORE_COMMIT: (4.9, 2.6),
    S.FAILED_AFTER_COMMIT: (6.6, 2.1),
}
# Edges that would cross a box, or each other, if drawn straight: the curve's control point moves
# by (dx, dy) pixels from the middle of the straight line.
BEND = {(S.AUTHORIZED, S.EXECUTING): (0, -58), (S.EXECUTING, S.OBSERVED): (0, -58),
        (S.EXECUTING, S.OUTCOME_UNKNOWN): (-28, 10), (S.OUTCOME_UNKNOWN, S.EXECUTING): (24, -12)}

BOX_W, BOX_H, COL_W, ROW_H, MARGIN, TOP = 178, 34, 196, 64, 20, 36
COLOURS = {"happy": "#e8f0fe", "terminal": "#fdecea", "open": "#fff4e5"}


def state_diagram_svg() -> str:
    missing = set(TRANSITIONS) - set(POSITION)
    if missing:
        raise ValueError(f"docs/gen/state_diagram.py has no position for {sorted(missing)}")
    width = int(MARGIN * 2 + COL_W * 7 + BOX_W)
    height = int(MARGIN * 2 + TOP + ROW_H * 2.6 + BOX_H)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="The states of a call and every allowed transition" font-family="sans-serif" font-size="11">',
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
    return MARGIN + col * COL_W + BOX_W / 2, MARGIN + TOP + row * ROW_H + BOX_H / 2


def _box(state: State) -> str:
    x, y = _centre(state)
    kind = "terminal" if state in TERMINAL and state != S.OBSERVED else (
        "happy" if POSITION[state][1] == 0 else "open")
    return (f'<g><rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
            f'fill="{COLOURS[kind]}" stroke="#555"/><text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle">'
            f'{escape(state.value)}</text></g>')


def _edge(src: State, dst: State) -> str:
    (x1, y1), (x2, y2) = _centre(src), _centre(dst)
    start, end = _border(x1, y1, x2, y2), _border(x2, y2, x1, y1)
    bend = BEND.get((src, dst))
    if bend:
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
