"""How ``logmetrics report`` shows its figures: a table on the terminal (``rich``), JSON for
scripts, or a self-contained HTML page with charts (``pygal``'s SVG, inline: no script, no
network), to attach to a bug report. The libraries are imported here only, never by ``watch``."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

from logmetrics import __version__
from logmetrics.offline.report import LATENCIES, PERCENTILES, Collected, Figures, bucket_for, percentile, summary

if TYPE_CHECKING:
    from rich.console import Console

Clock = Callable[[float | None], str]


def iso_time(tz: tzinfo | None) -> Callable[[float | None], str | None]:
    """Times as ISO 8601 strings in ``tz`` (None: the machine's zone), None for none (JSON)."""
    def when(t: float | None) -> str | None:
        return None if t is None else datetime.fromtimestamp(t, tz).astimezone(tz).isoformat(timespec="seconds")
    return when


def clock(tz: tzinfo | None) -> Clock:
    """Times in ``tz`` (None: the machine's zone) for a person, "-" for none (the zone is said
    once, by ``zone``)."""
    def when(t: float | None) -> str:
        return "-" if t is None else datetime.fromtimestamp(t, tz).astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")
    return when


def zone(c: Collected, tz: tzinfo | None) -> str:
    """The name of the zone the times are shown in (at the log's start)."""
    at = c.first if c.first is not None else 0.0
    return datetime.fromtimestamp(at, tz).astimezone(tz).strftime("%Z (UTC%z)")


def _num(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    return str(v)


def _secs(v: float) -> str:
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.3f} s"


def rows(s: dict[str, Any], when: Clock) -> list[tuple[str, str]]:
    """The figures of one stream as (label, text) rows, the ones it has."""
    out = [("log time", f"{when(s['first'])} to {when(s['last'])}")]
    if s["requests_by_outcome"]:
        out.append(("requests", ", ".join(f"{k} {_num(v)}" for k, v in s["requests_by_outcome"].items())
                    + f" (total {_num(s['requests'])})"))
    if s["http_requests_by_status"]:
        out.append(("HTTP requests", ", ".join(f"{k} {_num(v)}" for k, v in s["http_requests_by_status"].items())))
    if s["client_errors_by_type"]:
        out.append(("client errors (4xx)", ", ".join(f"{k} {_num(v)}" for k, v in s["client_errors_by_type"].items())))
    for key, label in (("prompt_tokens", "prompt tokens"), ("generation_tokens", "generation tokens"),
                       ("cached_prompt_tokens", "cached prompt tokens"), ("audio_seconds", "audio seconds"),
                       ("embeddings", "embeddings"),
                       ("generation_tokens_per_second", "generation tokens/s (mean)")):
        if s[key] is not None:
            out.append((label, _num(s[key])))
    for name, q in s["latency_seconds"].items():
        text = ", ".join(f"p{round(p * 100)} {_secs(q[f'p{round(p * 100)}'])}" for p in PERCENTILES)
        n = q["count"]
        out.append((name.removesuffix("_seconds").replace("_", " "), f"{text} ({n:,} request{'s' * (n != 1)})"))
    for e in s["errors"]:
        out.append((f"errors: {e['type']}", f"{_num(e['count'])}, first {when(e['first'])}, last {when(e['last'])}"))
    if s["startups"]:
        out.append(("start-ups", f"{s['startups']}: " + ", ".join(when(t) for t in s["startup_times"][:5])
                    + (" ..." if s["startups"] > 5 else "")))
    if s["busiest_minute"] is not None:
        b = s["busiest_minute"]
        out.append(("busiest minute", f"{when(b['start'])}: {_num(b['requests'])} requests"))
    return out


def _names(files: list[str]) -> str:
    return ", ".join(os.path.basename(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")


def _untimed(c: Collected) -> str:
    """What the report says of the files whose lines state no absolute time, and which time it gave them."""
    said = []
    if c.untimed:
        said.append(f"{len(c.untimed)} file(s) state no time on any line ({_names(c.untimed)}): their lines are "
                    "shown at the file's modification time.")
    if c.elapsed:
        said.append(f"{len(c.elapsed)} file(s) state only the time since the server started ({_names(c.elapsed)}): "
                    "it is anchored so that the file's last line falls at its modification time.")
    return " ".join(said)


def _title(s: dict[str, Any]) -> str:
    """One stream's heading: its backend and model (the models, if it served several), and its source."""
    name = f"{s['backend']}, model {s['model']}" if s["model"] else f"{s['backend']} (no model named)"
    return f"{name} — {s['source']}"


def table(c: Collected, tz: tzinfo | None, console: Console | None = None) -> None:
    """Print the report as tables on the terminal (plain text when the output is not one)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    when = clock(tz)
    console.print(f"{len(c.files)} file(s), {c.lines:,} lines, log time {when(c.first)} to {when(c.last)}, "
                  f"times in {zone(c, tz)}")
    if c.untimed or c.elapsed:
        console.print(f"{_untimed(c)}")
    if not c.figures:
        console.print("No backend's lines were recognised in these files (logmetrics check FILE says why).")
    for fig in c.figures:
        s = summary(fig)
        t = Table(title=_title(s), title_justify="left", show_header=False, expand=False)
        t.add_column("figure", style="bold")
        t.add_column("value", overflow="fold")
        for label, text in rows(s, when):
            t.add_row(label, text)
        console.print(t)


def as_json(c: Collected, tz: tzinfo | None) -> str:
    """The report as JSON: times as ISO 8601 strings (in ``tz``) and as Unix seconds."""
    when = iso_time(tz)
    backends = []
    for fig in c.figures:
        s = summary(fig)
        for key in ("first", "last"):
            s[f"{key}_time"] = when(s[key])
        s["startup_times"] = [when(t) for t in s["startup_times"]]
        for e in s["errors"]:
            e["first_time"], e["last_time"] = when(e["first"]), when(e["last"])
        if s["busiest_minute"] is not None:
            s["busiest_minute"]["start_time"] = when(s["busiest_minute"]["start"])
        backends.append(s)
    return json.dumps({"version": __version__, "files": c.files, "lines": c.lines, "first": c.first, "last": c.last,
                       "first_time": when(c.first), "last_time": when(c.last), "untimed_files": c.untimed,
                       "elapsed_time_files": c.elapsed, "backends": backends}, indent=2)


def series(fig: Figures, width: int) -> dict[str, list[tuple[float, float | None]]]:
    """Chart lines of one stream, per ``width`` seconds of log time: tokens/s, requests
    and errors in each bucket, and latency percentiles of the requests finished in it."""
    sums: dict[str, dict[int, float]] = {}
    rates: dict[str, dict[int, list[float]]] = {}
    obs: dict[int, list[float]] = {}
    for t, name, v in fig.timeline:
        k = int(t // width)
        if name == LATENCIES[0]:
            obs.setdefault(k, []).append(v)
        elif name in ("generation", "prompt", "requests", "http", "errors"):
            sums.setdefault(name, {})[k] = sums.get(name, {}).get(k, 0.0) + v
        elif name in ("generation_rate", "prompt_rate"):
            rates.setdefault(name, {}).setdefault(k, []).append(v)
    first, last = int(fig.first // width), int(fig.last // width)
    out: dict[str, list[tuple[float, float | None]]] = {}
    for name in ("generation", "prompt"):
        if name + "_rate" in rates:  # the throughput the backend logs, sampled: its mean in each bucket
            got = rates[name + "_rate"]  # that has a sample, joined up
            out[f"{name} tokens/s"] = [(float(k * width), sum(v) / len(v)) for k, v in sorted(got.items())]
            sums.pop(name, None)
    for name, label, scale in (("generation", "generation tokens/s", 1 / width),
                               ("prompt", "prompt tokens/s", 1 / width),
                               ("requests", "requests", 1.0), ("http", "HTTP requests", 1.0),
                               ("errors", "errors", 1.0)):
        if name in sums:
            out[label] = [(float(k * width), sums[name].get(k, 0.0) * scale) for k in range(first, last + 1)]
    ordered = {k: sorted(v) for k, v in obs.items()}
    for p in PERCENTILES:
        if ordered:  # no line across the buckets where no request finished
            out[f"request duration p{round(p * 100)} (s)"] = [
                (float(k * width), percentile(ordered[k], p) if k in ordered else None) for k in range(first, last + 1)]
    return out


def _span(seconds: int) -> str:
    """A bucket's width for a person: 1 s, 5 min, 1 h, 1 day."""
    for unit, n in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{seconds // n} {unit}" if seconds != 86400 else "day"
    return f"{seconds} s"


def _chart(title: str, lines: dict[str, list[tuple[float, float | None]]], tz: tzinfo | None, width: int,
           number: int) -> str:
    """One chart's SVG, its id ``chart-N`` (``number``), where pygal draws a random one: the page
    is the same, byte for byte, from the same log."""
    import pygal
    from pygal.style import CleanStyle

    fmt = "%Y-%m-%d" if width >= 86400 else "%Y-%m-%d %H:%M" if width >= 3600 else "%m-%d %H:%M:%S"
    chart = pygal.DateTimeLine(title=title, style=CleanStyle, js=[], disable_xml_declaration=True, width=900,
                               height=320, x_label_rotation=30, dots_size=1.5, fill=False, legend_at_bottom=True,
                               x_value_formatter=lambda dt: dt.astimezone(tz).strftime(fmt),
                               truncate_legend=-1, include_x_axis=True, allow_interruptions=True)
    chart.uuid = str(number)
    for label, points in lines.items():
        chart.add(label, [(datetime.fromtimestamp(t, tz), v) for t, v in points])
    return str(chart.render(is_unicode=True))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td {{ border-bottom: 1px solid #ddd; padding: 0.25em 1em 0.25em 0; vertical-align: top; }}
td:first-child {{ font-weight: 600; white-space: nowrap; }}
h2 {{ margin-top: 2em; border-bottom: 2px solid #888; }} figure {{ margin: 0 0 1em; }}
.small {{ color: #666; font-size: 0.9em; }}
</style></head><body>
<h1>{title}</h1>
<p class="small">{intro}</p>
{body}
<p class="small">Made by logmetrics {version} (logmetrics report --format html). Latency percentiles are
nearest-rank over the values the log states; tokens where the backend logs only throughput are
integrated from it, as on /metrics.</p>
</body></html>
"""


def as_html(c: Collected, tz: tzinfo | None) -> str:
    """The report as one self-contained HTML page: per stream, its figures and its charts."""
    when = clock(tz)
    esc = html.escape
    parts: list[str] = []
    charts = 0
    for fig in c.figures:
        s = summary(fig)
        parts.append(f"<h2>{esc(_title(s))}</h2>\n<table>")
        parts += [f"<tr><td>{esc(label)}</td><td>{esc(text)}</td></tr>" for label, text in rows(s, when)]
        parts.append("</table>")
        width = bucket_for(fig.last - fig.first)
        lines = series(fig, width)
        groups = (("tokens/s", [k for k in lines if k.endswith("tokens/s")]),
                  ("requests and errors", [k for k in lines if k in ("requests", "HTTP requests", "errors")]),
                  ("request duration", [k for k in lines if k.startswith("request duration")]))
        for name, keys in groups:
            if keys and any(len(lines[k]) > 1 for k in keys):
                title = f"{_title(s)}: {name}, per {_span(width)} of log time"
                charts += 1
                parts.append(f"<figure>{_chart(title, {k: lines[k] for k in keys}, tz, width, charts)}</figure>")
    if c.untimed or c.elapsed:
        parts.insert(0, f"<p><strong>{esc(_untimed(c))}</strong></p>")
    if not c.figures:
        parts.append("<p>No backend's lines were recognised in these files (<code>logmetrics check FILE</code> "
                     "says why).</p>")
    names = ", ".join(c.files[:5]) + (f" and {len(c.files) - 5} more" if len(c.files) > 5 else "")
    short = ", ".join(os.path.basename(f) for f in c.files[:3]) + (
        f" and {len(c.files) - 3} more" if len(c.files) > 3 else "")
    intro = (f"{len(c.files)} file(s) ({names}), {c.lines:,} lines, log time {when(c.first)} to {when(c.last)}, "
             f"times in {zone(c, tz)}.")
    return PAGE.format(title=esc(f"logmetrics report: {short}"), intro=esc(intro), body="\n".join(parts),
                       version=esc(__version__))
