"""The prompt stage: token counting and budget filling."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragbench as rb
from ragbench.errors import ConfigError
from ragbench.prompt import DEFAULT_TEMPLATE, PromptBuilder, build_prompt, count_tokens


def reference_count(text: str) -> int:
    """The documented rule, written out char by char (independent of the bytes tricks)."""
    tokens = 0
    run = 0
    for byte in text.encode("utf-8", "surrogatepass"):
        word = byte >= 0x80 or chr(byte).isalnum() or byte == ord("_")
        if word:
            run += 1
            continue
        if run:
            tokens += 1 + run // 8
            run = 0
        if not chr(byte).isspace():
            tokens += 1
    if run:
        tokens += 1 + run // 8
    return tokens


def make_result(n_hits: int = 10, words_per_hit: int = 60, query: str = "what is hnsw?"):
    hits = [
        rb.Hit(
            doc_id=f"doc-{i}",
            score=1.0 - i / 100,
            text=" ".join(f"chunk{i} word{j}" for j in range(words_per_hit)),
            metadata={"src": f"s{i}"},
        )
        for i in range(n_hits)
    ]
    return rb.RetrievalResult(query_id="q1", query=query, hits=hits)


# ----------------------------------------------------------------- count_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   \n\t ", 0),
        ("hello", 1),
        ("seven77", 1),  # 7 word bytes: one piece
        ("eight888", 2),  # 8 word bytes: 7 + 1
        ("x" * 15, 2),
        ("x" * 16, 3),
        ("a, b.", 4),
        ("(HNSW)", 3),
        ("é", 1),  # two UTF-8 bytes, one run
    ],
)
def test_count_tokens_follows_the_documented_rule(text: str, expected: int) -> None:
    assert count_tokens(text) == expected
    assert reference_count(text) == expected


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_count_tokens_matches_reference_and_is_deterministic(text: str) -> None:
    assert count_tokens(text) == reference_count(text)
    assert count_tokens(text) == count_tokens(str(text))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200))
def test_count_tokens_is_monotone_under_appending(a: str, b: str) -> None:
    assert count_tokens(a + b) >= count_tokens(a)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200), st.sampled_from([" ", "\n", "\n\n", "\t"]))
def test_count_tokens_adds_up_across_whitespace(a: str, b: str, sep: str) -> None:
    assert count_tokens(a + sep + b) == count_tokens(a) + count_tokens(b)


def test_count_tokens_is_near_four_chars_per_token_on_prose() -> None:
    prose = (
        "Retrieval augmented generation combines a vector index with a language model. "
        "The retriever finds relevant passages, and the generator answers from them. "
    ) * 20
    ratio = len(prose) / count_tokens(prose)
    assert 3.0 < ratio < 6.0


# ----------------------------------------------------------------- building


def test_everything_fits_under_a_large_budget_in_rank_order() -> None:
    result = make_result(n_hits=5, words_per_hit=10)
    prompt, tokens = build_prompt(result, max_tokens=4096)
    assert tokens == count_tokens(prompt)
    positions = [
        prompt.index(f"[{i + 1}] {hit.doc_id}\n{hit.text}") for i, hit in enumerate(result.hits)
    ]
    assert positions == sorted(positions)
    assert "Question: what is hnsw?" in prompt
    assert prompt.startswith(DEFAULT_TEMPLATE.split("{context}")[0])


@pytest.mark.parametrize("max_tokens", [150, 300, 777, 1100])
def test_budget_is_respected_and_hits_are_a_best_first_prefix(max_tokens: int) -> None:
    result = make_result(n_hits=10, words_per_hit=60)
    prompt, tokens = build_prompt(result, max_tokens=max_tokens)
    assert tokens <= max_tokens
    assert tokens == count_tokens(prompt)
    ranks = [int(m) for m in re.findall(r"^\[(\d+)\] doc-", prompt, flags=re.M)]
    assert ranks == list(range(1, len(ranks) + 1))
    assert len(ranks) < len(result.hits)
    # All but the last included chunk are whole; the last is whole or a prefix.
    for rank in ranks[:-1]:
        assert f"[{rank}] doc-{rank - 1}\n{result.hits[rank - 1].text}" in prompt
    if ranks:
        last_text = prompt.split(f"[{ranks[-1]}] doc-{ranks[-1] - 1}\n", 1)[1]
        last_text = last_text.split("\n\nQuestion:", 1)[0]
        assert result.hits[ranks[-1] - 1].text.startswith(last_text)


def test_the_chunk_that_does_not_fit_is_truncated_to_fill_the_budget() -> None:
    result = make_result(n_hits=3, words_per_hit=200)
    builder = PromptBuilder(max_tokens=600, min_chunk_tokens=16)
    prompt, tokens = builder.build(result)
    # Truncation fills the budget up to the last piece that fits.
    assert max(0, 600 - 8) <= tokens <= 600
    assert "[2] doc-1\n" in prompt
    assert result.hits[1].text not in prompt


def test_a_small_remainder_drops_the_chunk_instead() -> None:
    result = make_result(n_hits=3, words_per_hit=200)
    whole_first, first_tokens = build_prompt(
        rb.RetrievalResult("q1", result.query, result.hits[:1]), max_tokens=100_000
    )
    # Budget: the first chunk fits, then only a few tokens are left.
    builder = PromptBuilder(max_tokens=first_tokens + 10, min_chunk_tokens=16)
    prompt, tokens = builder.build(result)
    assert prompt == whole_first
    assert tokens == first_tokens


def test_custom_template_with_question_first() -> None:
    template = "Q: {question}\n---\n{context}\n---\nA:"
    result = make_result(n_hits=2, words_per_hit=5, query="why?")
    prompt, tokens = build_prompt(result, max_tokens=500, template=template)
    assert prompt.startswith("Q: why?\n---\n[1] doc-0\n")
    assert prompt.endswith("\n---\nA:")
    assert tokens == count_tokens(prompt)


def test_literal_braces_in_template_and_text_are_kept() -> None:
    template = "Use {this} literally.\n{context}\nQ: {question}"
    result = rb.RetrievalResult("q", "{context}?", [rb.Hit("d", 1.0, "f(x) = {x}")])
    prompt, _ = build_prompt(result, max_tokens=200, template=template)
    assert prompt == "Use {this} literally.\n[1] d\nf(x) = {x}\nQ: {context}?"


def test_no_hits_gives_the_template_and_question() -> None:
    prompt, tokens = build_prompt(rb.RetrievalResult("q", "hello", []), max_tokens=200)
    assert prompt == DEFAULT_TEMPLATE.replace("{context}", "").replace("{question}", "hello")
    assert tokens == count_tokens(prompt)


def test_builder_and_function_agree() -> None:
    result = make_result()
    assert PromptBuilder(max_tokens=900).build(result) == build_prompt(result, max_tokens=900)


# ----------------------------------------------------------------- errors


def test_unknown_parameter_is_named() -> None:
    with pytest.raises(ConfigError, match="max_tokenz"):
        PromptBuilder(max_tokenz=10)


def test_budget_smaller_than_template() -> None:
    with pytest.raises(ConfigError, match="smaller than the template"):
        PromptBuilder(max_tokens=5)
    with pytest.raises(ConfigError):
        build_prompt(make_result(), max_tokens=5)


def test_question_that_overflows_the_budget() -> None:
    fixed = count_tokens(DEFAULT_TEMPLATE.replace("{context}", "").replace("{question}", ""))
    result = make_result(query="word " * 100)
    with pytest.raises(ConfigError, match="question"):
        build_prompt(result, max_tokens=fixed + 50)


@pytest.mark.parametrize(
    "params",
    [
        {"max_tokens": 0},
        {"max_tokens": -3},
        {"max_tokens": 10.5},
        {"max_tokens": True},
        {"min_chunk_tokens": 0},
        {"template": "no placeholders"},
        {"template": "{context} only"},
        {"template": "{context} {question} {question}"},
        {"template": "x{context} {question}"},  # touches a letter
        {"template": "{context} {question}9"},
        {"template": 42},
    ],
)
def test_bad_parameters(params: dict) -> None:
    with pytest.raises(ConfigError):
        PromptBuilder(**params)
