"""The example configs ship in the package and load by name, from any folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ragbench as rb
from ragbench.config import load_config
from ragbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ["default", "hashing", "stub-llm", "transformers"]


def _env(tmp_path: Path) -> dict[str, str]:
    """The test's environment, with this checkout importable from another folder."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "RAGBENCH_CACHE_DIR": os.environ.get("RAGBENCH_CACHE_DIR", str(tmp_path / "cache")),
        "HF_HUB_OFFLINE": "1",
    }


def test_names_paths_and_loads() -> None:
    assert rb.configs.names() == SHIPPED
    for name in SHIPPED:
        path = rb.configs.path(name)
        assert path.parent == Path(rb.__file__).resolve().parent / "configs"
        assert rb.configs.load(name) == load_config(path)
    assert rb.configs.load("hashing")["embed"]["backend"] == "hashing"
    assert rb.configs.load("default")["embed"]["backend"] == "minilm"


def test_bench_configs_are_the_shipped_files_not_copies() -> None:
    bench = sorted((ROOT / "bench" / "configs").glob("*.toml"))
    assert [p.stem for p in bench] == SHIPPED
    for p in bench:
        assert p.samefile(rb.configs.path(p.stem)), p


def test_unknown_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="no shipped config 'defualt'.*default, hashing"):
        rb.configs.load("defualt")
    with pytest.raises(ConfigError, match=r"cannot read config defualt: no such file.*stub-llm"):
        rb.Pipeline.from_config("defualt")
    with pytest.raises(ConfigError, match=r"no such file.*shipped: default"):
        load_config("configs/missing.toml")


def test_a_file_of_that_name_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hashing").write_text('[retrieve]\nbackend = "flat"\n')
    assert load_config("hashing")["retrieve"]["backend"] == "flat"
    pipe = rb.Pipeline.from_config("default")  # no such file here: the shipped one
    try:
        assert pipe.config["embed"]["backend"] == "minilm"
    finally:
        pipe.close()


def test_wheel_carries_the_configs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("ragbench", "datasets"):
        shutil.copytree(ROOT / part, src / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    proc = subprocess.run(
        [*pip, str(src), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("ragbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ragbench/configs/{n}.toml" for n in SHIPPED} <= names


def test_run_a_shipped_config_by_name_from_another_folder(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("ragbench")
    proc = subprocess.run(
        [str(exe), "run", "-c", "hashing", "--queries", "3", "--warmup", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hnsw/numba/protobuf/inproc" in proc.stdout and "recall@10" in proc.stdout
    bad = subprocess.run(
        [str(exe), "run", "-c", "nope"], capture_output=True, text=True, cwd=tmp_path
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "shipped: default, hashing" in bad.stderr


def _readme_block(title: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split(f"## {title}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, f"no python block under {title}"
    return match.group(1)


@pytest.mark.slow  # ~10 s: loads the MiniLM model
def test_readme_python_example_runs_from_any_folder(tmp_path: Path) -> None:
    """The README's "Python API in ten lines", as written, run outside the repository.

    It uses the MiniLM model (installed with ragbench[embed]) for the query
    embeddings of the ``default`` config; the pydocs corpus vectors ship.
    """
    code = _readme_block("Python API in ten lines")
    assert 'from_config("default")' in code
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = elsewhere / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=_env(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hnsw/numba/protobuf/inproc" in proc.stdout
    assert re.search(r"recall@10 mean (0\.9\d|1\.00)", proc.stdout), proc.stdout
    assert list(elsewhere.iterdir()) == [script]  # nothing written into the folder it ran in
