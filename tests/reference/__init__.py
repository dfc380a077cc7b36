"""Independent numpy references for the model tests (forward.py) and tiny model writers
(fixtures.py)."""
