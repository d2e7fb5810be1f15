"""The UI's two charts (per-area bars, the score trend) as plain HTML and inline SVG.

Why not gr.BarPlot / gr.LinePlot: Gradio's plots hand Vega-Lite a spec declaring schema v5.17
while its bundle carries Vega-Lite v6, so every chart logged a version warning in the browser
console, and nothing on the Python side sets that schema. These need no script at all, read well
on a phone (horizontal bars, labels never rotated) and carry their numbers as text."""

from __future__ import annotations

from html import escape

SCALE_TOP = 10.0  # scores and mastery are out of 10
ZERO_SLIVER = 1.2  # percent of the track a 0 still fills, so the area is seen


def bar_chart(rows: list[tuple[str, float]], x_title: str, y_title: str, elem: str) -> str:
    """One horizontal bar per area, labelled "area · score" (the score as given, 0 included)."""
    if not rows:
        return ""
    lines = [
        f'<figure class="sp-chart sp-bars" id="{elem}-figure" '
        f'aria-label="{escape(y_title)} / {escape(x_title)}">',
        f'<figcaption class="sp-axis">{escape(x_title)} → {escape(y_title)}</figcaption>',
    ]
    for area, score in rows:
        label = f"{area} · {round(float(score), 1):g}"
        width = max(100 * float(score) / SCALE_TOP, ZERO_SLIVER)
        lines.append(
            f'<div class="sp-bar-row"><span class="sp-bar-label">{escape(label)}</span>'
            f'<span class="sp-bar-track"><span class="sp-bar" data-label="{escape(label)}" '
            f'style="width:{min(width, 100):.1f}%"></span></span></div>'
        )
    lines.append("</figure>")
    return "\n".join(lines)


def line_chart(points: list[tuple[str, float]], x_title: str, y_title: str) -> str:
    """The scores of the last sessions as a line over 0–10, each point labelled with its score."""
    if len(points) < 2:
        return ""
    width, height, left, right, top, bottom = 480, 200, 30, 14, 16, 40
    step = (width - left - right) / (len(points) - 1)

    def y(score: float) -> float:
        return top + (height - top - bottom) * (1 - min(max(score, 0), SCALE_TOP) / SCALE_TOP)

    xy = [(left + i * step, y(float(s))) for i, (_, s) in enumerate(points)]
    parts = [
        f'<figure class="sp-chart sp-trend"><svg viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(y_title)} / {escape(x_title)}" preserveAspectRatio="xMidYMid meet">'
    ]
    for tick in (0, 5, 10):
        ty = y(tick)
        parts.append(
            f'<line class="sp-grid" x1="{left}" x2="{width - right}" y1="{ty:.1f}" y2="{ty:.1f}"/>'
            f'<text class="sp-tick" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">{tick}</text>'
        )
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in xy)
    parts.append(f'<polyline class="sp-line" points="{path}"/>')
    for (label, score), (px, py) in zip(points, xy, strict=True):
        value = f"{round(float(score), 1):g}"
        parts.append(
            f'<circle class="sp-dot" cx="{px:.1f}" cy="{py:.1f}" r="4">'
            f"<title>{escape(label)}: {value}</title></circle>"
            f'<text class="sp-value" x="{px:.1f}" y="{py - 8:.1f}" text-anchor="middle">'
            f"{value}</text>"
            f'<text class="sp-tick" x="{px:.1f}" y="{height - bottom + 18}" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    parts.append(
        f'<text class="sp-axis" x="{width / 2:.0f}" y="{height - 4}" text-anchor="middle">'
        f"{escape(x_title)} → {escape(y_title)}</text></svg></figure>"
    )
    return "".join(parts)


CSS = """
.sp-chart { margin: 0.5em 0; }
.sp-chart .sp-axis { font-size: var(--text-sm); color: var(--body-text-color-subdued); }
figcaption.sp-axis { margin-bottom: 0.4em; }
.sp-bar-row { display: flex; align-items: center; gap: 0.6em; margin: 0.25em 0; }
.sp-bars { max-width: 560px; }
.sp-bar-label { flex: 0 0 min(38%, 14em); font-size: var(--text-sm); overflow-wrap: anywhere; }
.sp-bar-track { flex: 1; height: 1.1em; background: var(--background-fill-secondary);
  border-radius: 3px; }
.sp-bar { display: block; height: 100%; background: var(--color-accent); border-radius: 3px; }
.sp-trend svg { width: 100%; max-width: 560px; height: auto; }
.sp-trend .sp-grid { stroke: var(--border-color-primary); stroke-width: 1; }
.sp-trend .sp-line { fill: none; stroke: var(--color-accent); stroke-width: 2.5; }
.sp-trend .sp-dot { fill: var(--color-accent); }
.sp-trend text { fill: var(--body-text-color); font-size: 14px; }
.sp-trend .sp-tick, .sp-trend .sp-axis { fill: var(--body-text-color-subdued); }
"""
