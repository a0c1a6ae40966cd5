"""The MiniLM embedder runs each encode on its own torch thread count, restores it, and says so.

The count is observed inside the real model's forward pass (a forward
pre-hook on the transformer), not read from the embedder's attributes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.embedders.minilm import MiniLMEmbedder

pytestmark = pytest.mark.integration

QUERY = ["how do I read a file line by line"]
THREE = [*QUERY, "iterate over the lines of a text file", "the cat sat on the windowsill"]


@pytest.fixture(scope="module")
def torch() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
    except ImportError:
        pytest.fail("torch is not installed; install it with: pip install 'ragbench[embed]'")
    return torch


@pytest.fixture(scope="module")
def loaded(torch: Any) -> MiniLMEmbedder:
    emb = MiniLMEmbedder(batch_size=8)
    emb.load()
    return emb


@pytest.fixture
def seen(loaded: MiniLMEmbedder, torch: Any) -> Iterator[list[int]]:
    """torch.get_num_threads() at every forward pass of the model's transformer."""
    counts: list[int] = []
    transformer = loaded.model[0].auto_model  # the BertModel the torch runtime calls
    handle = transformer.register_forward_pre_hook(
        lambda *_: counts.append(torch.get_num_threads())
    )
    before = torch.get_num_threads()
    try:
        yield counts
    finally:
        handle.remove()
        torch.set_num_threads(before)


@pytest.mark.parametrize(("configured", "outside"), [(2, 1), (1, 2)])
def test_encode_runs_on_the_configured_count_and_restores_it(
    loaded: MiniLMEmbedder, seen: list[int], torch: Any, configured: int, outside: int
) -> None:
    torch.set_num_threads(outside)
    loaded.threads = configured
    try:
        v = loaded.embed(QUERY)
    finally:
        loaded.threads = None
    assert v.shape == (1, 384)
    assert seen == [configured]
    assert torch.get_num_threads() == outside
    noted = rb.threads.settings()["torch_threads_by_caller"]["embedder minilm"]
    assert configured in noted


def test_default_is_one_thread_per_query_and_the_setting_for_batches(
    loaded: MiniLMEmbedder, seen: list[int], torch: Any
) -> None:
    before = rb.threads.get_threads()
    rb.threads.set_threads(2)
    try:
        torch.set_num_threads(2)
        loaded.embed(QUERY)
        assert seen == [1] and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        loaded.embed(THREE)  # one batch of 3 (batch_size 8)
        assert seen == [1, 2] and torch.get_num_threads() == 1
    finally:
        rb.threads.set_threads(before)


def test_an_encode_that_fails_still_restores(
    loaded: MiniLMEmbedder, seen: list[int], torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        assert torch.get_num_threads() == 2  # pinned while it runs
        raise RuntimeError("encode failed")

    torch.set_num_threads(1)
    monkeypatch.setattr(loaded.model[0].auto_model, "forward", broken)
    loaded.threads = 2
    try:
        with pytest.raises(RuntimeError, match="encode failed"):
            loaded.embed(QUERY)
    finally:
        loaded.threads = None
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize(("setting", "expected"), [("embed.threads=2", [2]), (None, [1])])
def test_the_record_says_what_the_embed_stage_ran_on(
    tmp_path: Path, setting: str | None, expected: list[int]
) -> None:
    out = tmp_path / "run.jsonl"
    argv = ["compare", "--dataset", "pydocs", "--embed", "minilm", "--index", "hnsw"]
    argv += ["--rerank", "none"]
    argv += ["--queries", "3", "--warmup", "1", "--out", str(out)]
    if setting is not None:
        argv += ["--set", setting]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGBENCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "ragbench", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["config"]["embed"]["backend"] == "minilm"
    # pydocs ships its vectors: every encode was a request's query
    assert rec["env"]["threads"]["torch_threads_by_caller"] == {"embedder minilm": expected}
