"""Draw transport time against payload bytes per transport setting from ``compare`` records.

The records come from ``ragbench compare ... --transport http,http+tls=true,grpc+compression=gzip
--payload-k 10,100,1000 --payload-embeddings without,with --out FILE`` (see docs/transports.md).

Run: ``.venv/bin/python bench/transport_settings.py FILE... OUT.png`` (the records of every
file on one chart; the documentation site draws docs/findings' chart this way, through
``<!-- gen: plot --payload ... -->`` in tools/docs_hooks.py).
"""

from __future__ import annotations

import io
import sys

from ragbench.files import replace_bytes
from ragbench.results import plots, records


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: transport_settings.py RECORDS.jsonl... OUT.png", file=sys.stderr)
        return 2
    *files, out = argv
    fig = plots.payload_figure([r for f in files for r in records.read_records(f)])
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format="png")
    plots.pyplot().close(fig)
    replace_bytes(out, buf.getvalue())
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
