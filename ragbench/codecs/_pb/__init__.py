"""Generated protobuf code for ``protos/ragbench/v1/retrieval.proto``.

Do not edit the ``*_pb2.py`` / ``*_pb2.pyi`` files: regenerate them with
``python tools/gen_protos.py`` (``tests/project/test_protos_fresh.py`` fails when they
are stale). Importing this package does not import protobuf; import
``ragbench.codecs._pb.retrieval_pb2`` for that.
"""
