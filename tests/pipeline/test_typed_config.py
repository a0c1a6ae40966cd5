"""The drivers take the typed configuration (issue 30): a Pipeline holds and reads a Config.

The config is converted once, where it enters (a file, a shipped name, a
dict); the pipeline, its set-up and the ``run``/``compare``/``load`` commands
read the typed tables, and only a record (and a worker process) gets the
plain dict.
"""

from __future__ import annotations

from typing import Any

import pytest

from ragbench.pipeline import Pipeline
from ragbench.settings import Config, parse_config, read_config
from ragbench.settings.params import HnswBuild

SMALL: dict[str, Any] = {
    "dataset": {"name": "synthetic", "n": 300, "dim": 16, "n_queries": 12, "seed": 3},
    "run": {"queries": 6, "warmup": 1, "k": 5, "k_candidates": 20},
    "retrieve": {"backend": "hnsw", "build": {"M": 8}, "search": {"ef": 32}},
    "rerank": {"backend": "numpy"},
    "serialize": {"backend": "json", "shape": "columnar"},
    "transport": {"backend": "inproc"},
}


def test_a_pipeline_holds_the_typed_config() -> None:
    typed = parse_config(SMALL)
    with Pipeline(typed) as given, Pipeline(SMALL) as read:
        assert given.config is typed  # taken as it is: no second conversion
        assert isinstance(read.config, Config) and read.config == typed
        assert read.config.run.k == 5 and read.config.retrieve.build == HnswBuild(M=8)
        assert read.describe() == "hnsw/numpy/json/columnar/inproc"
        # code that indexed the plain dict Pipeline.config was still works, for one release
        with pytest.warns(DeprecationWarning, match=r"read config\.run"):
            assert read.config["run"]["k"] == 5


def test_set_up_and_run_read_no_plain_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    # the whole config becomes a dict only for the record, after the requests ran
    calls: list[str] = []
    real = Config.to_dict

    def counted(self: Config) -> dict[str, dict[str, Any]]:
        calls.append("to_dict")
        return real(self)

    monkeypatch.setattr(Config, "to_dict", counted)
    with Pipeline(SMALL) as pipe:
        pipe.setup()
        assert calls == []
        report = pipe.run()
    assert calls == ["to_dict"]
    assert report.config == real(pipe.config)  # the record keeps the plain dict
    assert report.config["retrieve"]["build"] == {"M": 8}
    assert report.config["serialize"]["shape"] == "columnar"


def test_replace_changes_one_table_of_a_copy() -> None:
    cfg = parse_config(SMALL)
    fast = cfg.replace("retrieve", fast_build=True, index_file="x.index")
    assert fast.retrieve.fast_build and fast.retrieve.index_file == "x.index"
    assert fast.retrieve.build == cfg.retrieve.build and type(fast.retrieve) is type(cfg.retrieve)
    assert not cfg.retrieve.fast_build and cfg.retrieve.index_file is None  # frozen original
    assert list(cfg.stages()) == [
        "embed",
        "retrieve",
        "rerank",
        "serialize",
        "transport",
        "generate",
    ]


def test_backend_parameters_stay_one_mapping_per_table() -> None:
    cfg = parse_config({**SMALL, "embed": {"backend": "hashing", "dim": 16, "re_embed": True}})
    assert cfg.embed.params() == {"dim": 16}  # ragbench's own key (re_embed) is not passed on
    assert cfg.serialize.params() == {"shape": "columnar"}
    assert cfg.retrieve.build_params() == {"M": 8}
    assert cfg.retrieve.search_params() == {"ef": 32}
    assert cfg.embed.to_dict() == {"backend": "hashing", "re_embed": True, "dim": 16}
    assert read_config(cfg) == cfg.to_dict()  # options merge into a typed config as into a file
