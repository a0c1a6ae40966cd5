"""ragbench.timing.Parts: the one shape of a backend's call split into three named, timed parts."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from ragbench.errors import InputError
from ragbench.pipeline.context import RequestContext
from ragbench.pipeline.stages import RetrieveStage
from ragbench.timing import Parts


def test_parts_read_by_name_in_order() -> None:
    parts = Parts(("send", "server", "decode"), (5, 700, 11))
    assert parts["server"] == 700 and parts["send"] == 5 and parts["decode"] == 11
    assert list(parts) == ["send", "server", "decode"]  # the order they ran
    assert parts.ns == (5, 700, 11) and parts.total == 716
    assert dict(parts) == {"send": 5, "server": 700, "decode": 11}
    assert parts == {"decode": 11, "send": 5, "server": 700}  # a mapping's equality
    with pytest.raises(KeyError):
        parts["query"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.ns = (1, 2, 3)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("names", "ns"),
    [(("a", "b"), (1, 2, 3)), (("a", "b", "c"), (1, 2)), (("a", "a", "c"), (1, 2, 3))],
)
def test_parts_refuse_a_shape_that_is_not_three_named_parts(names, ns) -> None:
    with pytest.raises(InputError, match="three distinct names"):
        Parts(names, ns)


class _Split:
    """A vector index that splits its search as ``parts`` says (the stage reads only this)."""

    input_kind = "vectors"

    def __init__(self, parts: object) -> None:
        self.parts = parts

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((1, k), np.int64), np.zeros((1, k), np.float32)

    def last_parts(self) -> object:
        return self.parts


def _retrieve(parts: object) -> RequestContext:
    stage = RetrieveStage(_Split(parts), 3, {})  # type: ignore[arg-type]
    ctx = RequestContext(0, "q0", "a query")
    ctx.query_vector = np.zeros((1, 4), np.float32)
    stage(ctx)
    return ctx


def test_the_retrieve_stage_keeps_the_parts_times_in_their_order() -> None:
    ctx = _retrieve(Parts(("prepare", "query", "decode"), (3, 2, 1)))
    assert ctx.retrieve_parts == (3, 2, 1)
    assert _retrieve(None).retrieve_parts is None


def test_an_old_tuple_or_dict_from_last_parts_still_works_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="ragbench.timing.Parts"):
        assert _retrieve((4, 5, 6)).retrieve_parts == (4, 5, 6)
    with pytest.warns(DeprecationWarning):
        assert _retrieve({"a": 1, "b": 2, "c": 3}).retrieve_parts == (1, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(InputError, match="not three"):
            _retrieve((1, 2))
