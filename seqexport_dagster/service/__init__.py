"""`seqexport serve`: the HTTP API over `api.Exports`, with per-account tokens (`create_app`)."""
