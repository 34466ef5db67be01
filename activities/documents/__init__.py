"""The documents wing: ``local_search_tool`` over the operator's resources, with the extraction,
chunking and index it needs, and the roots that bound which files a request may name."""
