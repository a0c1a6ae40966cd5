"""Old name of :mod:`ragbench.indexes._embedded_engines`, kept while the pgvector modules import it.

Remove once the pgvector modules import ``.._embedded_engines`` (issue 30 renamed the private modules).
"""

from ._embedded_engines import WhereSearch as WhereSearch
from ._embedded_engines import padded as padded
