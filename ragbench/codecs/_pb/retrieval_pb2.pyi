from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Hit(_message.Message):
    __slots__ = ("doc_id", "score", "text", "metadata", "embedding")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    score: float
    text: str
    metadata: _containers.ScalarMap[str, str]
    embedding: bytes
    def __init__(self, doc_id: _Optional[str] = ..., score: _Optional[float] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., embedding: _Optional[bytes] = ...) -> None: ...

class RetrievalResult(_message.Message):
    __slots__ = ("query_id", "query", "hits")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    query: str
    hits: _containers.RepeatedCompositeFieldContainer[Hit]
    def __init__(self, query_id: _Optional[str] = ..., query: _Optional[str] = ..., hits: _Optional[_Iterable[_Union[Hit, _Mapping]]] = ...) -> None: ...

class RetrievalResultColumns(_message.Message):
    __slots__ = ("query_id", "query", "doc_ids", "scores", "texts", "metadata_counts", "metadata_keys", "metadata_values", "dim", "embeddings", "embedding_dims")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_COUNTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_KEYS_FIELD_NUMBER: _ClassVar[int]
    METADATA_VALUES_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    query: str
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    scores: _containers.RepeatedScalarFieldContainer[float]
    texts: _containers.RepeatedScalarFieldContainer[str]
    metadata_counts: _containers.RepeatedScalarFieldContainer[int]
    metadata_keys: _containers.RepeatedScalarFieldContainer[str]
    metadata_values: _containers.RepeatedScalarFieldContainer[str]
    dim: int
    embeddings: bytes
    embedding_dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, query_id: _Optional[str] = ..., query: _Optional[str] = ..., doc_ids: _Optional[_Iterable[str]] = ..., scores: _Optional[_Iterable[float]] = ..., texts: _Optional[_Iterable[str]] = ..., metadata_counts: _Optional[_Iterable[int]] = ..., metadata_keys: _Optional[_Iterable[str]] = ..., metadata_values: _Optional[_Iterable[str]] = ..., dim: _Optional[int] = ..., embeddings: _Optional[bytes] = ..., embedding_dims: _Optional[_Iterable[int]] = ...) -> None: ...
