"""The example configs ship in the package and load by name, from any folder."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import ragbench as rb
from ragbench.errors import ConfigError
from ragbench.settings import load_config, parse_config, shipped_names, shipped_path

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
    assert rb.settings.shipped_names() == SHIPPED
    for name in SHIPPED:
        path = rb.settings.shipped_path(name)
        assert path.parent == Path(rb.__file__).resolve().parent / "settings" / "shipped"
        assert rb.settings.parse_config(name) == rb.settings.parse_config(path)
        assert load_config(name) == load_config(path)
    assert rb.settings.parse_config("hashing").embed.backend == "hashing"
    assert rb.settings.parse_config("default").embed.backend == "minilm"


@pytest.mark.parametrize(
    ("old", "check"),
    [
        ("ragbench.config", lambda m: m.parse_config is parse_config and m.MAX_COUNT == 10**9),
        (
            "ragbench.params",
            lambda m: m.HnswBuild is importlib.import_module("ragbench.settings.params").HnswBuild,
        ),
        (
            "ragbench.configs",
            lambda m: (
                m.names() == shipped_names()
                and m.path("hashing") == shipped_path("hashing")
                and m.load("hashing") == parse_config("hashing").to_dict()
            ),
        ),
    ],
)
def test_old_configuration_modules_warn_and_still_work(old: str, check: Any) -> None:
    # the configuration's old names (issue 30): importing one warns, naming ragbench.settings,
    # and every name it had is still there for one release
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=r"ragbench\.settings"):
        module = importlib.import_module(old)
    assert check(module)
    with pytest.warns(DeprecationWarning, match=r"ragbench\.configs is deprecated"):
        sys.modules.pop("ragbench.configs", None)
        rb.__dict__.pop("configs", None)
        assert rb.configs.names() == SHIPPED  # the top-level lazy name too


def test_names_settings_no_longer_exports_warn_and_still_work() -> None:
    from ragbench.settings import variants

    assert "VARIANTS" not in rb.settings.__all__
    with pytest.warns(DeprecationWarning, match=r"ragbench\.settings\.variants"):
        assert rb.settings.VARIANTS is variants.VARIANTS
    with pytest.raises(AttributeError):
        _ = rb.settings.no_such_name


def test_bench_configs_are_the_shipped_files_not_copies() -> None:
    bench = sorted((ROOT / "bench" / "configs").glob("*.toml"))
    assert [p.stem for p in bench] == SHIPPED
    for p in bench:
        assert p.samefile(shipped_path(p.stem)), p


def test_unknown_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="no shipped config 'defualt'.*default, hashing"):
        shipped_path("defualt")
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
        assert pipe.config.embed.backend == "minilm"
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
    assert {f"ragbench/settings/shipped/{n}.toml" for n in SHIPPED} <= names


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
