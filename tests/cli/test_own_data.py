"""A user's own corpus: CSV and text folders, non-UTF-8 bytes, empty rows, content-keyed vectors."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ragbench as rb
from ragbench import datasets
from ragbench.errors import ConfigError, DatasetError

PASSAGES = [
    "Lists are mutable sequences, typically used to store collections of items.",
    "A dictionary maps hashable keys to arbitrary values.",
    "The with statement wraps a block with methods of a context manager.",
    "Generators return an iterator that yields one value at a time.",
]
QUESTIONS = ["how do I store items in order?", "what does the with statement do?"]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE_DIR", str(tmp_path / "cache"))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def jsonl_corpus(folder: Path, passages: list[str] = PASSAGES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        folder / "queries.jsonl", [{"id": f"q{i}", "text": t} for i, t in enumerate(QUESTIONS)]
    )
    return write_jsonl(
        folder / "docs.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(passages)]
    )


def text_folder(folder: Path, passages: list[str] = PASSAGES) -> Path:
    (folder / "corpus" / "sub").mkdir(parents=True)
    for i, text in enumerate(passages):
        sub = "sub/" if i % 2 else ""
        (folder / "corpus" / f"{sub}p{i}.txt").write_text(text, encoding="utf-8")
    (folder / "queries.txt").write_text("\n".join(QUESTIONS) + "\n\n", encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- formats


def test_csv_corpus_with_metadata_quotes_and_bom(tmp_path: Path) -> None:
    (tmp_path / "docs.csv").write_bytes(
        b"\xef\xbb\xbfid,text,source\r\n"
        b'a,"first, with a comma",manual\r\n'
        b'b,"spans\r\ntwo lines",\r\n'
    )
    (tmp_path / "queries.csv").write_text("id,text\nq1,which one?\n", encoding="utf-8")
    ds = datasets.load(tmp_path / "docs.csv")
    assert ds.name == "docs"
    assert ds.corpus.ids == ["a", "b"]
    assert ds.corpus.texts == ["first, with a comma", "spans\r\ntwo lines"]
    assert ds.corpus.metadata == [{"source": "manual"}, {}]
    assert ds.queries.ids == ["q1"] and ds.queries.texts == ["which one?"]


def test_csv_problems_name_the_row(tmp_path: Path) -> None:
    (tmp_path / "queries.csv").write_text("id,text\nq1,?\n")
    (tmp_path / "docs.csv").write_text("name,body\nx,y\n")
    with pytest.raises(DatasetError, match=r"docs\.csv:1: the header names no 'id' or 'text'"):
        datasets.load(tmp_path / "docs.csv")
    (tmp_path / "docs.csv").write_text("id,text\na,x\nb,y,z\n")
    with pytest.raises(DatasetError, match=r"docs\.csv:3: 3 fields, the header has 2"):
        datasets.load(tmp_path / "docs.csv")
    with pytest.raises(DatasetError, match="this is a queries file"):
        datasets.load(tmp_path / "queries.csv")


def test_text_folder_corpus(tmp_path: Path) -> None:
    folder = text_folder(tmp_path / "notes")
    (folder / "corpus" / "scan.pdf").write_bytes(b"%PDF")
    (folder / "corpus" / ".hidden.txt").write_text("editor swap file")
    ds = datasets.load(folder)
    assert ds.name == "notes"
    assert ds.corpus.ids == ["p0.txt", "p2.txt", "sub/p1.txt", "sub/p3.txt"]
    assert ds.corpus.texts == [PASSAGES[0], PASSAGES[2], PASSAGES[1], PASSAGES[3]]
    assert ds.queries.ids == ["q1", "q2"] and ds.queries.texts == QUESTIONS
    assert any("scan.pdf" in note and "skipped" in note for note in ds.notes)


def test_text_folder_without_queries_or_files(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    with pytest.raises(DatasetError, match=r"no queries: expected .*queries\.txt"):
        datasets.load(tmp_path)
    (tmp_path / "queries.txt").write_text("why?\n")
    with pytest.raises(DatasetError, match=r"corpus: no \.txt or \.md files"):
        datasets.load(tmp_path)


# --------------------------------------------------------------------------- not UTF-8


def test_latin1_byte_in_a_jsonl_names_file_line_and_offset(tmp_path: Path) -> None:
    path = jsonl_corpus(tmp_path)
    good = path.read_bytes()
    second = good.index(b"\n") + 1
    cut = second + good[second:].index(b"dictionary")
    path.write_bytes(good[:cut] + "dictionnaire é".encode("latin-1") + good[cut:])
    offset = cut + len("dictionnaire ")
    with pytest.raises(DatasetError) as err:
        datasets.load(path)
    msg = str(err.value)
    assert f"docs.jsonl:2: not UTF-8: byte 0xe9 at byte offset {offset}" in msg
    assert "re-encode" in msg and "surrogates" not in msg


def test_latin1_byte_in_a_csv_and_in_queries(tmp_path: Path) -> None:
    body = b"id,text\na,first\nb,caf" + b"\xe9" + b" au lait\n"
    (tmp_path / "docs.csv").write_bytes(body)
    (tmp_path / "queries.csv").write_text("id,text\nq,?\n")
    at = body.index(b"\xe9")
    with pytest.raises(
        DatasetError, match=rf"docs\.csv:3: not UTF-8: byte 0xe9 at byte offset {at}\b"
    ):
        datasets.load(tmp_path / "docs.csv")
    (tmp_path / "docs.csv").write_text("id,text\na,first\n")
    (tmp_path / "queries.csv").write_bytes(b"id,text\nq,na\xefve?\n")
    with pytest.raises(
        DatasetError, match=r"queries\.csv:2: not UTF-8: byte 0xef at byte offset 12"
    ):
        datasets.load(tmp_path / "docs.csv")


def test_latin1_byte_in_a_text_file_of_a_folder(tmp_path: Path) -> None:
    folder = text_folder(tmp_path / "notes")
    bad = folder / "corpus" / "sub" / "p1.txt"
    bad.write_bytes(b"line one\nSch\xf6ne Gr\xfc\xdfe\n")
    with pytest.raises(DatasetError) as err:
        datasets.load(folder)
    msg = str(err.value)
    assert f"{bad}:2: not UTF-8: byte 0xf6 at byte offset 12" in msg
    assert "iconv -f latin1 -t utf-8 p1.txt" in msg


# --------------------------------------------------------------------------- empty rows


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_empty_passage_is_refused_with_its_line(tmp_path: Path, blank: str) -> None:
    path = jsonl_corpus(tmp_path, [PASSAGES[0], blank, PASSAGES[1]])
    with pytest.raises(DatasetError) as err:
        datasets.load(path)
    msg = str(err.value)
    assert "docs.jsonl:2: empty passage (id 'd1')" in msg
    assert "drop_empty" in msg


def test_empty_query_and_empty_csv_row_and_empty_text_file(tmp_path: Path) -> None:
    jsonl_corpus(tmp_path / "j")
    write_jsonl(
        tmp_path / "j" / "queries.jsonl", [{"id": "q0", "text": "ok"}, {"id": "q1", "text": " "}]
    )
    with pytest.raises(DatasetError, match=r"queries\.jsonl:2: empty query \(id 'q1'\)"):
        datasets.load(tmp_path / "j" / "docs.jsonl")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "docs.csv").write_text('id,text\na,x\nb," "\n')
    (tmp_path / "c" / "queries.csv").write_text("id,text\nq,?\n")
    with pytest.raises(DatasetError, match=r"docs\.csv:3: empty passage \(id 'b'\)"):
        datasets.load(tmp_path / "c" / "docs.csv")
    folder = text_folder(tmp_path / "t")
    (folder / "corpus" / "p2.txt").write_text("\n\n")
    with pytest.raises(DatasetError, match=r"p2\.txt: empty passage \(id 'p2\.txt'\)"):
        datasets.load(folder)


def test_drop_empty_drops_with_a_warning_and_a_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = jsonl_corpus(tmp_path, [PASSAGES[0], " ", PASSAGES[1], ""])
    with caplog.at_level(logging.WARNING, logger="ragbench"):
        ds = datasets.load(path, drop_empty=True)
    assert ds.corpus.ids == ["d0", "d2"]
    assert ds.corpus.texts == PASSAGES[:2]
    note = "dropped 2 empty passage row(s) (drop_empty)"
    assert any(note in n and "docs.jsonl:2" in n and "docs.jsonl:4" in n for n in ds.notes)
    assert any(note in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="drop_empty must be true or false"):
        datasets.load(path, drop_empty="yes")


def test_drop_empty_from_a_config_table(tmp_path: Path) -> None:
    path = jsonl_corpus(tmp_path, [PASSAGES[0], " ", PASSAGES[1]])
    pipe = rb.Pipeline.from_config(
        {
            "dataset": {"path": str(path), "drop_empty": True},
            "run": {"k": 2, "k_candidates": 2},
            "embed": {"backend": "hashing"},
            "retrieve": {"backend": "flat"},
        }
    )
    with pipe:
        report = pipe.run(queries=2, warmup=0)
    assert report.requests == 2
    assert pipe.dataset is not None and pipe.dataset.corpus.ids == ["d0", "d2"]
    with pytest.raises(DatasetError, match="empty passage"):
        datasets.from_table({"path": str(path)})


# --------------------------------------------------------------------------- vectors by content


class Counting:
    """The real hashing embedder, counting the texts it is asked to embed."""

    texts = 0

    def __init__(self, **params: Any) -> None:
        self._inner = rb.embedders.create("hashing", **params)
        self.name = "counting"
        self.dim = self._inner.dim
        self.fingerprint = self._inner.fingerprint

    def load(self) -> int:
        return int(self._inner.load())

    def embed(self, texts: Any) -> np.ndarray:
        type(self).texts += len(texts)
        return np.asarray(self._inner.embed(texts))


@pytest.fixture
def counting() -> Any:
    Counting.texts = 0
    rb.embedders.register("counting", Counting)
    yield Counting
    rb.embedders.registry.unregister("counting")


def test_same_texts_from_a_file_and_a_folder_embed_once(tmp_path: Path, counting: Any) -> None:
    file_ds = datasets.load(jsonl_corpus(tmp_path / "as-file"))
    folder_ds = datasets.load(text_folder(tmp_path / "as-folder"))
    assert file_ds.name != folder_ds.name and file_ds.corpus.ids != folder_ds.corpus.ids
    first = file_ds.corpus_vectors("counting")
    assert counting.texts == len(PASSAGES)
    second = folder_ds.corpus_vectors("counting")  # other name, path, ids and row order
    assert counting.texts == len(PASSAGES)
    assert folder_ds.cache_events[-1].hit is True
    by_text = dict(zip(file_ds.corpus.texts, first, strict=True))
    want = np.stack([by_text[t] for t in folder_ds.corpus.texts])
    np.testing.assert_array_equal(second, want)
    np.testing.assert_array_equal(first, rb.embedders.create("hashing").embed(PASSAGES))
    # queries too: queries.jsonl and queries.txt hold the same questions
    file_ds.query_vectors("counting")
    folder_ds.query_vectors("counting")
    assert counting.texts == len(PASSAGES) + len(QUESTIONS)


def test_a_changed_text_is_embedded_again(tmp_path: Path, counting: Any) -> None:
    datasets.load(jsonl_corpus(tmp_path / "a")).corpus_vectors("counting")
    assert counting.texts == len(PASSAGES)
    changed = [*PASSAGES[:3], PASSAGES[3] + " Edited."]
    ds = datasets.load(jsonl_corpus(tmp_path / "b", changed))
    vectors = ds.corpus_vectors("counting")
    assert counting.texts == 2 * len(PASSAGES)
    assert ds.cache_events[-1].hit is False
    np.testing.assert_array_equal(vectors, rb.embedders.create("hashing").embed(changed))


def test_duplicate_texts_are_embedded_once(tmp_path: Path, counting: Any) -> None:
    passages = [PASSAGES[0], PASSAGES[1], PASSAGES[0]]
    vectors = datasets.load(jsonl_corpus(tmp_path, passages)).corpus_vectors("counting")
    assert counting.texts == 2
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert vectors.shape == (3, rb.embedders.create("hashing").dim)


def test_content_keyed_entry_is_still_verified(tmp_path: Path, counting: Any) -> None:
    ds = datasets.load(jsonl_corpus(tmp_path / "a"))
    want = ds.corpus_vectors("counting")
    npy = Path(ds.cache_events[-1].path)
    data = bytearray(npy.read_bytes())
    data[-3] ^= 0xFF
    npy.write_bytes(bytes(data))
    again = datasets.load(text_folder(tmp_path / "b"))
    got = again.corpus_vectors("counting")
    assert again.cache_events[-1].hit is False
    assert again.cache_events[-1].note.startswith("rebuilt: sha256")
    assert counting.texts == 2 * len(PASSAGES)
    assert sorted(map(tuple, got)) == sorted(map(tuple, want))


def test_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    folder = text_folder(tmp_path / "notes")
    raw = bytes(folder / "corpus") + b"/caf\xe9.txt"
    with open(raw, "wb") as fh:
        fh.write(b"a passage in a file named in Latin-1")
    with pytest.raises(DatasetError, match=r"file name b'caf\\xe9\.txt' is not UTF-8; rename it"):
        datasets.load(folder)


def test_jsonl_with_a_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    path = jsonl_corpus(tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    ds = datasets.load(path)
    assert ds.corpus.texts == PASSAGES
