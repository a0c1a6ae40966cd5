from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RetrievalResult(_message.Message):
    __slots__ = ("query_id", "query", "doc_ids", "scores", "texts", "metadata_counts", "metadata_keys", "metadata_values", "embedding_dims", "embeddings")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_COUNTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_KEYS_FIELD_NUMBER: _ClassVar[int]
    METADATA_VALUES_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    query: str
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    scores: _containers.RepeatedScalarFieldContainer[float]
    texts: _containers.RepeatedScalarFieldContainer[str]
    metadata_counts: _containers.RepeatedScalarFieldContainer[int]
    metadata_keys: _containers.RepeatedScalarFieldContainer[str]
    metadata_values: _containers.RepeatedScalarFieldContainer[str]
    embedding_dims: _containers.RepeatedScalarFieldContainer[int]
    embeddings: bytes
    def __init__(self, query_id: _Optional[str] = ..., query: _Optional[str] = ..., doc_ids: _Optional[_Iterable[str]] = ..., scores: _Optional[_Iterable[float]] = ..., texts: _Optional[_Iterable[str]] = ..., metadata_counts: _Optional[_Iterable[int]] = ..., metadata_keys: _Optional[_Iterable[str]] = ..., metadata_values: _Optional[_Iterable[str]] = ..., embedding_dims: _Optional[_Iterable[int]] = ..., embeddings: _Optional[bytes] = ...) -> None: ...
