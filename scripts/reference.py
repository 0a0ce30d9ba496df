#!/usr/bin/env python3
"""Write the metric reference of docs/operating.md from the catalog and rules/*.yml.

    python scripts/reference.py           # rewrite the text between the guide's reference markers
    python scripts/reference.py --check   # exit 1 if the committed text differs

The reference comes from logmetrics/store/catalog.toml (each family's name, type, labels and help,
and how to read it) and rules/*.yml (what records or alerts on it).
Needs PyYAML (in the test extras).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logmetrics.store import reference  # noqa: E402  # after the path is set, as a script run from anywhere

GUIDE = ROOT / "docs" / "operating.md"


def groups() -> list[dict[str, object]]:
    """Every rule group of rules/*.yml."""
    out: list[dict[str, object]] = []
    for path in sorted((ROOT / "rules").glob("*.yml")):
        out += yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return out


def main() -> int:
    """Rewrite the guide's reference, or with --check say whether it is up to date."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the text is not up to date")
    args = ap.parse_args()
    doc = GUIDE.read_text(encoding="utf-8")
    text = reference.markdown(groups())
    if args.check:
        if reference.block(doc) != text:
            print(f"the metric reference of {GUIDE.relative_to(ROOT)} is out of date: run python "
                  "scripts/reference.py", file=sys.stderr)
            return 1
        return 0
    GUIDE.write_text(reference.splice(doc, text), encoding="utf-8")
    print(f"wrote the metric reference of {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
