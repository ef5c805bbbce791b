"""Schedulers: how a model version's requests become payloads for its instances."""
