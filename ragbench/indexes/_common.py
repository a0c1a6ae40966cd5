"""Old name of :mod:`ragbench.indexes._arrays`, kept while ``ragbench.indexes.pgvector`` imports it.

Remove once the pgvector modules import ``.._arrays`` (issue 30 renamed the private modules).
"""

from ._arrays import F32 as F32
from ._arrays import I64 as I64
