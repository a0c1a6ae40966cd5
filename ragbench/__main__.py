"""``python -m ragbench``: the ``ragbench`` command line (also how child processes run it)."""

from ragbench.cli import main

raise SystemExit(main())
