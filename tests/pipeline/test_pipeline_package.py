"""The pipeline package: its public names, the frozen set-up result, and capabilities as Protocols.

A backend needs only its stage Protocol; what it can do beyond that (an
async client, a caveat, a self-description, a model name) is found by the
attributes it has (:mod:`ragbench.pipeline.capabilities`), never by its name.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench import generators
from ragbench.generators import FirstToken
from ragbench.generators.stub_server import MODEL_ID
from ragbench.pipeline import Built, Pipeline, tracing
from ragbench.pipeline.stages import GenerateStage, TransportStage

PACKAGE = Path(rb.__file__).resolve().parent

SMALL = {
    "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 12, "seed": 3},
    "run": {"queries": 6, "warmup": 1, "k": 5, "k_candidates": 20},
    "retrieve": {"backend": "flat"},
    "rerank": {"backend": "numpy"},
    "serialize": {"backend": "json"},
    "transport": {"backend": "inproc"},
}


class PlainLLM:
    """A third-party generator with the Protocol's members and nothing else."""

    name = "plain-llm"
    simulated = False

    def __init__(self, **params: Any) -> None:
        self.prompts: list[str] = []

    def start(self) -> int:
        return 0

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        self.prompts.append(prompt)
        return FirstToken("ok", 0)

    def close(self) -> None:
        pass


class TalkativeLLM(PlainLLM):
    """The same with every optional capability the pipeline looks for."""

    name = "talkative-llm"
    model_id = "acme/tiny-7b"
    max_tokens = 3
    chat = False

    @property
    def caveat(self) -> str | None:
        return "ACME TEST MODEL: not a real deployment"

    def describe(self) -> dict[str, Any]:
        return {"model": self.model_id, "where": "in the test"}


@pytest.fixture
def third_party(monkeypatch: pytest.MonkeyPatch) -> None:
    for cls in (PlainLLM, TalkativeLLM):
        generators.register(cls.name, cls)
    yield
    for cls in (PlainLLM, TalkativeLLM):
        generators.registry.unregister(cls.name)


def test_the_public_names_of_ragbench_pipeline_stay() -> None:
    import ragbench.pipeline as p

    before = ["STAGES", "Components", "Pipeline", "RequestContext", "RequestRecord"]
    before += ["SharedParts", "far_fields", "interleave", "RECORD_BYTES", "TRACE_FLUSH_EVERY"]
    before += ["LruTtlCache", "CacheStage", "EmbedStage", "RetrieveStage", "RerankStage"]
    before += ["TruncateStage", "SerializeStage", "TransportStage", "GenerateStage", "freeze"]
    with warnings.catch_warnings():  # the moved names warn (tests/project/test_public_api.py)
        warnings.simplefilter("ignore", DeprecationWarning)
        missing = [name for name in before if not hasattr(p, name)]
    assert missing == []
    assert rb.Pipeline is p.Pipeline and callable(p.interleave)
    assert p.STAGES[0] == "embed" and p.STAGES[-1] == "generate"


def test_no_module_of_the_split_packages_is_over_1000_lines() -> None:
    """The split packages stay split by topic; a module may be as long as one cohesive part
    needs (about 1 000 lines, docs/contributing/style.md), never cut to meet a number."""
    folders = ("pipeline", "datasets", "workers", "aioworkers")
    paths = [p for f in folders for p in (PACKAGE / f).glob("*.py")]
    paths += [PACKAGE / "executors.py", PACKAGE / "rayload.py"]
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(paths)
    }
    assert len(sizes) >= 20
    assert {name: n for name, n in sizes.items() if n > 1000} == {}


def test_set_up_returns_a_frozen_built_object() -> None:
    with Pipeline(SMALL) as pipe:
        pipe.setup()
        built = pipe.built
        assert isinstance(built, Built)
        assert built.dataset is pipe.dataset and built.stage_names == tuple(pipe.stage_names)
        assert [s.name for s in built.stages] == [s.name for s in pipe.stages]
        assert built.truth.shape == (12, 5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.metric = "l2"  # type: ignore[misc]
        report = pipe.run()
    assert report.requests == 6


def test_a_generator_with_only_its_protocol_runs(third_party: None) -> None:
    with Pipeline({**SMALL, "generate": {"backend": "plain-llm"}}) as pipe:
        report = pipe.run()
        llm = pipe.components.generator
        assert isinstance(llm, PlainLLM) and len(llm.prompts) == 6 + 1  # + the warm-up
        stage = pipe.stages[-1]
        assert isinstance(stage, GenerateStage) and not stage.awaitable and not stage.instant
        transport = pipe.stages[-2]
        assert isinstance(transport, TransportStage) and not transport.awaitable  # inproc
        info = tracing.llm_info(llm)
    assert report.caveats == [] and "generator_info" not in report.info
    assert info == {
        "operation": "chat",
        "provider": "ragbench.plain-llm",
        "model": None,
        "max_tokens": None,
    }


def test_optional_capabilities_are_found_by_what_a_backend_has(third_party: None) -> None:
    with Pipeline({**SMALL, "generate": {"backend": "talkative-llm"}}) as pipe:
        report = pipe.run()
        info = tracing.llm_info(pipe.components.generator)
    assert report.caveats == ["ACME TEST MODEL: not a real deployment"]
    assert report.info["generator_info"] == {"model": "acme/tiny-7b", "where": "in the test"}
    assert info == {
        "operation": "text_completion",
        "provider": "ragbench.talkative-llm",
        "model": "acme/tiny-7b",
        "max_tokens": 3,
    }


def test_the_stub_names_its_model_without_a_special_case() -> None:
    stub = generators.create("stub")  # created, not started: no server
    info = tracing.llm_info(stub)
    assert info["model"] == MODEL_ID and info["provider"] == "ragbench.stub"
    assert info["operation"] == "chat" and info["max_tokens"] == stub.max_tokens
    assert tracing.llm_info(generators.create("none")) == {}
