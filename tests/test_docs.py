"""docs/operating.md keeps up with the code: the generated metric reference, every configuration key,
and every dashboard panel."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from logmetrics.app.config import INPUT_KEYS, PROCESS_KEYS, STATIC_LABELS, TOP_KEYS
from logmetrics.app.reload import FIXED
from logmetrics.store import reference
from logmetrics.store.catalog import FAMILIES, SELF_FAMILIES
from logmetrics.store.guard import LABEL_LIMITS
from tests.test_prometheus import binary
from tests.test_rules import rule_groups, unknown_metrics

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "operating.md").read_text()
README = (ROOT / "README.md").read_text()
ALL = FAMILIES + SELF_FAMILIES


def section(title: str) -> str:
    """The guide's text from the heading ``title`` to the next heading of the same level or above."""
    level = title.split(" ", 1)[0]
    start = GUIDE.index(f"\n{title}\n")
    ends = [m.start() for m in re.finditer(rf"\n#{{1,{len(level)}}} ", GUIDE) if m.start() > start]
    return GUIDE[start: ends[0] if ends else len(GUIDE)]


def queries() -> list[str]:
    """Every PromQL expression the reference suggests."""
    return [expr for fam in ALL for _, expr in
            (reference.HINTS[fam.name].queries or reference.default_queries(fam, reference.HINTS[fam.name].slo))]


def test_metric_reference_is_generated() -> None:
    """The reference between the guide's markers is exactly what scripts/reference.py writes."""
    assert reference.block(GUIDE) == reference.markdown(rule_groups()), "run: python scripts/reference.py"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "reference.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_every_family_has_an_entry() -> None:
    """Each family of the catalog has a reading hint and a section in the reference; no hint is stale."""
    names = [f.name for f in ALL]
    assert sorted(reference.HINTS) == sorted(names)
    block = reference.block(GUIDE)
    missing = [n for n in names if f"\n#### `{n}`\n" not in block]
    assert not missing


def test_histogram_thresholds_are_bucket_boundaries() -> None:
    """A 'share within' query reads a bucket that exists (an le that no series has gives nothing)."""
    for fam in ALL:
        slo = reference.HINTS[fam.name].slo
        assert fam.kind == "histogram" or slo is None, fam.name
        assert slo is None or slo in fam.buckets, fam.name
    for expr in queries():
        for le in re.findall(r'le="([^"]*)"', expr):
            assert any(le == repr(b) for f in ALL for b in f.buckets), expr


def test_reference_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool accepts every suggested query, and each reads only metrics of the catalog or of rules/."""
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    for expr in queries():
        assert not unknown_metrics(expr, recorded), expr
    rules = {"groups": [{"name": "reference", "rules": [{"record": f"docs:query_{i}", "expr": expr}
                                                          for i, expr in enumerate(queries())]}]}
    path = tmp_path / "reference.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(queries())} rules found" in out.stdout


def test_reference_links_its_alerts_to_the_runbook() -> None:
    """Each alert the reference names has a runbook section (its link's target)."""
    alerts = set(re.findall(r"\]\(#([a-z0-9]+)\)", reference.block(GUIDE)))
    assert alerts
    headings = {h.lower() for h in re.findall(r"^### (\w+)$", section("## Runbook"), re.M)}
    assert alerts <= headings


def rows(text: str) -> dict[str, list[str]]:
    """A Markdown table's rows by the first cell, backticks removed."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            out[cells[0].strip("`")] = cells[1:]
    return out


def test_config_reference_names_every_key() -> None:
    """Every key the --config file accepts has a row in the guide's configuration reference."""
    top = rows(section("### Top-level keys"))
    assert sorted(top) == sorted(TOP_KEYS)
    assert sorted(rows(section("### `[[input]]`"))) == sorted(INPUT_KEYS)
    assert all(f"`labels.{name}`" in section("### `[[input]]`") for name in STATIC_LABELS)
    assert sorted(rows(section("### `[[process]]`"))) == sorted(PROCESS_KEYS)
    limits = rows(section("### `[label_limits]`"))
    assert {k: int(v[0].split()[0]) for k, v in limits.items()} == LABEL_LIMITS


def test_config_reference_says_what_needs_a_restart() -> None:
    """The keys marked 'restart' are exactly those a SIGHUP cannot change; the others are 'live'."""
    top = rows(section("### Top-level keys"))
    header = [c.strip() for c in section("### Top-level keys").split("\n| key |", 1)[1].split("\n")[0].split("|")]
    col = header.index("on SIGHUP")  # the cells after the key
    assert {k for k, v in top.items() if v[col] == "restart"} == {name for _, name in FIXED}
    assert {v[col] for v in top.values()} == {"restart", "live"}


def panel_titles(panels: list[dict[str, object]]) -> list[str]:
    """The titles of panels and rows, those inside collapsed rows included."""
    out: list[str] = []
    for p in panels:
        out.append(str(p["title"]))
        out += panel_titles(p.get("panels", []))  # type: ignore[arg-type]  # JSON: a list of panels
    return out


def test_dashboard_walk_names_every_panel() -> None:
    """Every row and panel title of both shipped dashboards appears in the guide's dashboard walk."""
    walk = section("### The dashboards, row by row")
    models = [json.loads(p.read_text()) for p in sorted((ROOT / "grafana" / "dashboards").glob("*.json"))]
    assert len(models) == 2
    for model in models:
        assert f"`{model['uid']}`" in walk
        titles = panel_titles(model["panels"])
        assert len(titles) > 15
        missing = [t for t in titles if f"**{t}**" not in walk.replace("\n  ", " ")]
        assert not missing, f"{model['uid']}: {missing}"
        for note in model.get("annotations", {}).get("list", []):
            assert f"**{note['name']}**" in walk


def test_readme_links_the_guide() -> None:
    """The README points operators to the guide, and the guide to the configuration page."""
    assert "[docs/operating.md](docs/operating.md)" in README
    assert "(configuration.md#configuration-file)" in GUIDE
    assert "\n## Configuration file\n" in (ROOT / "docs" / "configuration.md").read_text()


def _code(text: str) -> list[str]:
    """The lines of a Markdown text's code blocks, and its inline code spans."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    return [line for b in blocks for line in b.splitlines()] + re.findall(r"`([^`\n]+)`", rest)


def test_every_command_and_flag_the_docs_show_exists() -> None:
    """Each 'logmetrics COMMAND --flag' the README and docs/ show is a command of the CLI with that
    flag (or a global one, which goes before the command: 'logmetrics -v watch')."""
    from logmetrics.cli.main import cli

    commands = cli.commands  # a click Group: its commands by name
    top = {opt for p in cli.params for opt in (*p.opts, *p.secondary_opts)}
    flags = {name: {"--help", "-h", *(opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts))}
             for name, cmd in commands.items()}
    problems: list[str] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for code in _code(doc.read_text()):
            if code.split(" ", 1)[0] in commands:  # a command named alone: `watch --oneshot`
                code = "logmetrics " + code
            for m in re.finditer(r"(?:^\s*(?:\$\s+)?(?:[A-Z_]+=\S*\s+)*|[|;(]\s*|&&\s*)(?:\S*/)?logmetrics((?: -v+)*) "
                                 r"([a-z][\w-]*)([^|;#&)]*)", code):
                command, args = m.group(2), m.group(3)
                if command not in commands:
                    problems.append(f"{doc.name}: no command {command!r}: {code.strip()}")
                    continue
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", args):
                    if flag.startswith("--") and flag not in flags[command]:
                        where = "a global flag: it goes before the command" if flag in top else "no such flag"
                        problems.append(f"{doc.name}: {command} {flag}: {where}: {code.strip()}")
                    elif not flag.startswith("--") and flag in top and flag not in flags[command]:
                        problems.append(f"{doc.name}: {command} {flag}: a global flag goes before the command")
    assert not problems, "\n".join(problems)


def test_the_poll_interval_help_says_how_often_inotify_reads() -> None:
    """--poll-interval's help gives the coalescing interval the runner really uses."""
    from logmetrics.app.runner import COALESCE_SECONDS
    from logmetrics.cli.main import cli

    watch = cli.commands["watch"]
    (opt,) = [p for p in watch.params if "--poll-interval" in p.opts]
    assert f"at most every {COALESCE_SECONDS:g} s" in (opt.help or "")
