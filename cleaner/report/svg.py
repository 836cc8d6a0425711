"""Grouped bar charts as self-contained inline SVG (the report must open offline: no CDN, no script)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

PALETTE = ("#6b7a8f", "#2a9d8f", "#e76f51", "#e9c46a", "#264653")


@dataclass(frozen=True)
class BarChart:
    title: str
    categories: list[str]  # x-axis groups
    series: dict[str, list[float]]  # legend label -> one value per category
    value_format: str = "{:.2f}"
    width: int = 420
    height: int = 240

    def __post_init__(self) -> None:
        for label, values in self.series.items():
            if len(values) != len(self.categories):
                raise ValueError(
                    f"chart {self.title!r}: series {label!r} has {len(values)} values for {len(self.categories)} categories"
                )


def render_bar_chart(chart: BarChart, chart_id: str) -> str:
    left, right, top, bottom = 40, 10, 30, 48
    plot_w, plot_h = chart.width - left - right, chart.height - top - bottom
    peak = max((v for values in chart.series.values() for v in values), default=0.0)
    scale = plot_h * 0.88 / peak if peak > 0 else 0.0  # headroom for the value labels
    group_w = plot_w / max(len(chart.categories), 1)
    bar_w = group_w * 0.8 / max(len(chart.series), 1)
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" role="img" aria-label="{escape(chart.title)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{chart.width}" height="{chart.height}" '
        f'viewBox="0 0 {chart.width} {chart.height}">',
        f"<title>{escape(chart.title)}</title>",
        f'<text x="{chart.width / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{escape(chart.title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
    ]
    for c_index, category in enumerate(chart.categories):
        group_x = left + c_index * group_w + group_w * 0.1
        for s_index, (label, values) in enumerate(chart.series.items()):
            value = values[c_index]
            bar_h = value * scale
            x = group_x + s_index * bar_w
            y = top + plot_h - bar_h
            color = PALETTE[s_index % len(PALETTE)]
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.92:.1f}" height="{bar_h:.1f}" fill="{color}">'
                f"<title>{escape(label)} / {escape(category)}: {chart.value_format.format(value)}</title></rect>"
            )
            parts.append(
                f'<text x="{x + bar_w * 0.46:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="10">'
                f"{escape(chart.value_format.format(value))}</text>"
            )
        parts.append(
            f'<text x="{group_x + group_w * 0.4:.1f}" y="{top + plot_h + 14}" text-anchor="middle" font-size="11">'
            f"{escape(category)}</text>"
        )
    legend_x = left
    for s_index, label in enumerate(chart.series):
        color = PALETTE[s_index % len(PALETTE)]
        parts.append(f'<rect x="{legend_x}" y="{chart.height - 18}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{legend_x + 14}" y="{chart.height - 9}" font-size="11">{escape(label)}</text>')
        legend_x += 24 + 7 * len(label)
    parts.append("</svg>")
    return "".join(parts)
