"""python -m paged_lab ..."""

from paged_lab.cli import main

raise SystemExit(main())
