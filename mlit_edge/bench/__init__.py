"""`mlit-edge bench`: timing (`stats`), fidelity against the reference, host memory and environment,
one process per artifact (`isolation`), the orchestration (`run`) and the report."""
