"""`mlit-edge bench`: the configuration (`config`), one artifact's bench (`artifact`: timing in `stats`,
fidelity against the reference, host memory in `host`), one process per artifact (`isolation`), the
whole command over several artifacts (`suite`) and the report (`report`)."""
