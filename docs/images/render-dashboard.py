#!/usr/bin/env python3
"""Draw the main panels of the operator's Grafana dashboard from a Prometheus into a PNG.

    python3 docs/images/render-dashboard.py PROMETHEUS_URL START END OUTPUT [RATE_INTERVAL]

PROMETHEUS_URL is the Prometheus that scraped the operator (e.g. http://127.0.0.1:9090);
START and END bound the window, as Unix seconds or ISO 8601 times (2026-11-28T06:40:00Z);
OUTPUT is the PNG to write (docs/images/dashboard.png); RATE_INTERVAL replaces Grafana's
`$__rate_interval` (default 30s: at least four scrapes, as Grafana wants, and smooth enough at
a scrape every 1 s to 7.5 s).

The panels and their queries are read from deploy/monitoring/grafana-dashboard.json (or the
file named by the DASHBOARD environment variable), so the picture shows what the dashboard
shows: each panel's title, its targets' `expr` run with /api/v1/query_range over the window,
legends from each target's `legendFormat`, the panel's unit, its stacking and minimum.
Grafana's variables are replaced: `$__rate_interval` as above, any other (`$namespace`, ...)
by `.*`; `${datasource}` is the Prometheus given. Series that stay 0 over the whole window are
left out (the operator starts every known label value at zero, so the legends would list them
all); a panel with series that are all 0 says so. Needs matplotlib (`pip install matplotlib`).

The run behind docs/images/dashboard.png, with its Prometheus configuration and the commands
that made it, is in docs/operations.md, "Dashboard".
"""

import datetime as dt
import json
import math
import os
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.environ.get(
    "DASHBOARD", os.path.join(HERE, "..", "..", "deploy", "monitoring", "grafana-dashboard.json")
)

# The main panels, by title, in the order drawn (two a row, as on the dashboard).
MAIN_PANELS = [
    "Sessions by phase",
    "Browser → Running latency",
    "Browsers started per minute",
    "Browsers ended by outcome",
    "API writes by verb and resource",
    "Work queue: reconciles in flight",
    "Reconciles and errors",
    "Reconcile duration",
]

# Grafana's classic palette, in its order.
PALETTE = [
    "#73BF69", "#F2CC0C", "#5794F2", "#FF780A", "#F2495C", "#B877D9",
    "#8AB8FF", "#FF9830", "#37872D", "#C4162A", "#1F60C4", "#8F3BB8",
    "#FADE2A", "#96D98D", "#FFB357", "#CA95E5",
]

POINTS = 300  # samples per series across the window, at most


def parse_time(text):
    """Unix seconds or an ISO 8601 time (UTC when it names no zone)."""
    try:
        return float(text)
    except ValueError:
        t = dt.datetime.fromisoformat(text)
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        return t.timestamp()


def seconds(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not match:
        sys.exit(f"{text!r}: not a duration such as 30s or 1m")
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def substitute(expr, rate_interval):
    expr = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    return re.sub(r"\$\{\w+\}|\$\w+", ".*", expr)


def query_range(url, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=60) as r:
        body = json.load(r)
    if body.get("status") != "success":
        sys.exit(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt).strip()


def si(value, unit=""):
    """A value as Grafana's `short` unit writes it: 1.5 K, 2 Mil, 0.25."""
    if value == 0:
        return "0" + unit
    for factor, suffix in ((1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}{unit}"
    return f"{value:.3g}{unit}"


def duration(value):
    """Grafana's `s` unit: ms below a second, s below a minute, then min."""
    if value == 0:
        return "0 s"
    if abs(value) < 1:
        return f"{value * 1000:.3g} ms"
    if abs(value) < 60:
        return f"{value:.3g} s"
    return f"{value / 60:.3g} min"


FORMATS = {
    "short": si,
    "s": duration,
    "ops": lambda v: si(v, " ops/s"),
    "wps": lambda v: si(v, " wps"),
    "reqps": lambda v: si(v, " req/s"),
    "percentunit": lambda v: f"{v * 100:.3g}%",
    "bytes": lambda v: si(v, "B"),
}


def draw(ax, panel, times, series, start, end):
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    custom = defaults.get("custom", {})
    stacked = custom.get("stacking", {}).get("mode", "none") == "normal"
    fill = custom.get("fillOpacity", 0) / 100
    unit = defaults.get("unit", "short")
    ax.set_title(panel["title"], loc="left", fontsize=12, fontweight="bold")
    # A series that stays 0 adds nothing to a stack and would hide the lines under its own.
    shown_series = [s for s in series if any(v != 0 and not math.isnan(v) for v in s[1])]
    if not series or not shown_series:
        ax.text(0.5, 0.5, "No data" if not series else "0 throughout", transform=ax.transAxes,
                ha="center", va="center", color="gray")
    base = None  # stacking adds each series onto the ones before it, gaps counting as 0
    for i, (label, values) in enumerate(shown_series):
        color = PALETTE[i % len(PALETTE)]
        if stacked:
            below = base or [0.0] * len(values)
            top = [b + (0.0 if math.isnan(v) else v) for b, v in zip(below, values)]
            shown = [math.nan if math.isnan(v) else t for t, v in zip(top, values)]
            ax.plot(times, shown, color=color, linewidth=1.2, label=label)
            ax.fill_between(times, below, shown, color=color, alpha=max(fill, 0.1), linewidth=0)
            base = top
        else:
            ax.plot(times, values, color=color, linewidth=1.4, label=label)
            if fill:
                ax.fill_between(times, 0, values, color=color, alpha=fill, linewidth=0)
    ax.set_xlim(dt.datetime.fromtimestamp(start, dt.timezone.utc), dt.datetime.fromtimestamp(end, dt.timezone.utc))
    if "min" in defaults:
        ax.set_ylim(bottom=defaults["min"])
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=defaults.get("decimals") == 0))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: FORMATS.get(unit, si)(v)))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(tz=dt.timezone.utc, minticks=4, maxticks=8))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=dt.timezone.utc))
    ax.grid(True, color="#e4e4e4", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(labelsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=9,
            frameon=False,
            handlelength=1.2,
        )


def main(argv):
    if len(argv) not in (5, 6):
        sys.exit(__doc__)
    url, output = argv[1], argv[4]
    start, end = math.floor(parse_time(argv[2])), math.ceil(parse_time(argv[3]))
    rate_interval = argv[5] if len(argv) == 6 else "30s"
    seconds(rate_interval)
    if end <= start:
        sys.exit("END must be after START")
    step = max(1, math.ceil((end - start) / POINTS))
    with open(DASHBOARD, encoding="utf-8") as f:
        dashboard = json.load(f)
    by_title = {p.get("title"): p for p in dashboard["panels"]}
    missing = [t for t in MAIN_PANELS if t not in by_title]
    if missing:
        sys.exit(f"{DASHBOARD} has no panel {missing}")
    panels = [by_title[t] for t in MAIN_PANELS]

    # Every series on the same grid, NaN (a gap) where it has no sample, as stacking needs.
    grid = [start + i * step for i in range(int((end - start) // step) + 1)]
    times = [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in grid]
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(16, 2.6 * rows + 0.6), dpi=100)
    for ax, panel in zip(axes.flat, panels):
        series = []
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], rate_interval)
            found = []
            for result in query_range(url, expr, start, end, step):
                samples = {round(float(t)): float(v) for t, v in result["values"]}
                values = [samples.get(round(t), math.nan) for t in grid]
                found.append((legend(target.get("legendFormat", ""), result["metric"]), values))
            series.extend(sorted(found, key=lambda s: s[0]))
        draw(ax, panel, times, series, start, end)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    first = dt.datetime.fromtimestamp(start, dt.timezone.utc)
    last = dt.datetime.fromtimestamp(end, dt.timezone.utc)
    fig.suptitle(
        f"{dashboard.get('title', 'dashboard')}: {first:%Y-%m-%d %H:%M:%S} – {last:%H:%M:%S} UTC"
        f"  (rate interval {rate_interval}, step {step}s)",
        x=0.01,
        ha="left",
        fontsize=13,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97), h_pad=1.2, w_pad=1.0)
    fig.savefig(output)
    print(f"wrote {output} ({fig.get_size_inches()[0] * fig.dpi:.0f}×{fig.get_size_inches()[1] * fig.dpi:.0f})")


if __name__ == "__main__":
    main(sys.argv)
