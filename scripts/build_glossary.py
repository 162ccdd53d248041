"""Write docs/glossary.md from paged_lab/classroom/glossary.py (the one source of the series' words).

    python scripts/build_glossary.py           # write it
    python scripts/build_glossary.py --check   # exit 1 when docs/glossary.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "glossary.md"


def main(argv: list[str] | None = None) -> int:
    from paged_lab.classroom import glossary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether docs/glossary.md is up to date")
    args = parser.parse_args(argv)
    text = glossary.markdown()
    if args.check:
        fresh = DOC.exists() and DOC.read_text() == text
        state = "up to date" if fresh else "out of date: run python scripts/build_glossary.py"
        print(f"{DOC.relative_to(ROOT)} is {state}")
        return 0 if fresh else 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)} ({len(glossary.TERMS)} terms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
