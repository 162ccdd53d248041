"""python -m paged_lab ..."""

from paged_lab.tools.cli import main

raise SystemExit(main())
