"""Regenerate ragbench/codecs/_pb from protos/.

Run from the repository root::

    python tools/gen_protos.py

It runs ``python -m grpc_tools.protoc -Iprotos --python_out=DIR --pyi_out=DIR
protos/ragbench/v1/retrieval.proto`` into a temporary directory and copies the
generated ``retrieval_pb2.py`` / ``retrieval_pb2.pyi`` flat into
``ragbench/codecs/_pb/``. The schema imports no other .proto file, so the
generated module needs no import-path rewriting; the descriptor keeps its
canonical name ``ragbench/v1/retrieval.proto`` in the default descriptor pool.

``tests/project/test_protos_fresh.py`` calls :func:`generate` into a temporary
directory and fails when the committed files differ (stale generated code).
Requires ``grpcio-tools`` (a dev dependency).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTOS = ["ragbench/v1/retrieval.proto"]
OUT_DIR = ROOT / "ragbench" / "codecs" / "_pb"
GENERATED = ["retrieval_pb2.py", "retrieval_pb2.pyi"]


def generate(out_dir: Path) -> list[Path]:
    """Run protoc for every schema and write the generated files flat into ``out_dir``.

    Returns the paths written. Raises ``RuntimeError`` with protoc's message if it fails.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(PROTO_ROOT / p) for p in PROTOS),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"protoc failed ({proc.returncode}): {proc.stderr.strip()}")
        for proto in PROTOS:
            stem = Path(proto).with_suffix("")
            for suffix in ("_pb2.py", "_pb2.pyi"):
                src = Path(tmp) / f"{stem}{suffix}"
                dst = out_dir / src.name
                shutil.copyfile(src, dst)
                written.append(dst)
    return written


def main() -> int:
    for path in generate(OUT_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
