"""Line plots as standalone SVG files: no plotting library on the controller or the device."""

from __future__ import annotations

from pathlib import Path

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def line_plot(
    path: Path,
    series: dict[str, list[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    title: str,
    width: int = 640,
    height: int = 400,
) -> None:
    pts = [p for s in series.values() for p in s]
    if not pts:
        path.write_text(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60">'
            f'<text x="10" y="30">{title}: no data</text></svg>'
        )
        return
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1e-3
    L, R, T, B = 70, 20, 40, 50
    sx = lambda x: L + (x - x0) / (x1 - x0) * (width - L - R)  # noqa: E731
    sy = lambda y: height - B - (y - y0) / (y1 - y0) * (height - T - B)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
        f'<line x1="{L}" y1="{height - B}" x2="{width - R}" y2="{height - B}" stroke="black"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{height - B}" stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 10}" text-anchor="middle">{xlabel}</text>',
        f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" '
        f'text-anchor="middle">{ylabel}</text>',
    ]
    for k in range(5):
        xv, yv = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        out.append(
            f'<text x="{sx(xv):.1f}" y="{height - B + 16}" text-anchor="middle">{xv:.3g}</text>'
        )
        out.append(f'<text x="{L - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
    for n, (name, s) in enumerate(series.items()):
        c = COLORS[n % len(COLORS)]
        pts_s = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(s))
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{pts_s}"/>')
        out.append(f'<text x="{width - R - 100}" y="{T + 15 * n}" fill="{c}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out))
