"""The agent's gRPC front, ``metashift.v1``: the MetadataStore and Session services
(``service``), their Calls, Session and Watch streams, what the calls share (``errors``) and the
callers' bearer tokens (``auth``)."""
