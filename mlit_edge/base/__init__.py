"""The floor every room stands on: one-line messages, the value rules of every option, capped text reads, the
SIGTERM rule, Python 3.8 shims and the routing metrics. Standard library and numpy only; it imports no other
room."""
