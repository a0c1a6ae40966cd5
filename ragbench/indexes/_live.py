"""Old name of :mod:`ragbench.indexes._writes_and_filters`, kept while the pgvector modules import it.

Remove once the pgvector modules import ``.._writes_and_filters`` (issue 30 renamed the private
modules).
"""

from ._writes_and_filters import IdSpace as IdSpace
from ._writes_and_filters import positions_to_delete as positions_to_delete
from ._writes_and_filters import space_after_add as space_after_add
from ._writes_and_filters import space_after_delete as space_after_delete
