"""Agreement of two judging passes over the same pydocs pairs (Cohen's kappa).

    .venv/bin/python tools/judge_agreement.py datasets/pydocs/qrels.tsv datasets/pydocs/qrels-second-pass.tsv

Prints, over the pairs both files judge: exact agreement, Cohen's kappa on the three grades
(unweighted and linearly weighted) and on relevant (grade >= 1) vs not, and the confusion
matrix (rows: first file, columns: second).
"""

from __future__ import annotations

import sys
from pathlib import Path

GRADES = (0, 1, 2)


def read(path: Path) -> dict[tuple[str, str], int]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines if line)}


def kappa(pairs: list[tuple[int, int]], labels: tuple[int, ...], weighted: bool) -> float:
    """Cohen's kappa; ``weighted``: linear weights |a - b| / (len(labels) - 1)."""
    n = len(pairs)
    span = len(labels) - 1

    def cost(a: int, b: int) -> float:
        return abs(a - b) / span if weighted else float(a != b)

    observed = sum(cost(a, b) for a, b in pairs) / n
    first = {x: sum(1 for a, _ in pairs if a == x) / n for x in labels}
    second = {x: sum(1 for _, b in pairs if b == x) / n for x in labels}
    expected = sum(first[a] * second[b] * cost(a, b) for a in labels for b in labels)
    return 1.0 - observed / expected


def main() -> None:
    one, two = read(Path(sys.argv[1])), read(Path(sys.argv[2]))
    common = sorted(set(one) & set(two))
    pairs = [(one[k], two[k]) for k in common]
    binary = [(int(a >= 1), int(b >= 1)) for a, b in pairs]
    queries = len({q for q, _ in common})
    print(f"{len(common)} pairs of {queries} queries judged twice")
    print(f"exact agreement {sum(a == b for a, b in pairs) / len(pairs):.3f}")
    print(
        f"Cohen's kappa, grades 0/1/2: {kappa(pairs, GRADES, False):.3f} unweighted, {kappa(pairs, GRADES, True):.3f} linear-weighted"
    )
    print(f"Cohen's kappa, relevant (>= 1) or not: {kappa(binary, (0, 1), False):.3f}")
    print("confusion (rows: first pass 0/1/2, columns: second pass 0/1/2):")
    for a in GRADES:
        print(
            "  " + " ".join(f"{sum(1 for x, y in pairs if x == a and y == b):5d}" for b in GRADES)
        )


if __name__ == "__main__":
    main()
