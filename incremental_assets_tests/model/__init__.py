"""Model-based test: random, reproducible sequences against a real PostgreSQL source and the real
assets, the lake checked against a reference model after every run (`machine.py`)."""
