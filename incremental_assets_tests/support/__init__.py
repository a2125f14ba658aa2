"""What the tests share, one job per module: Spark, the databases, the project builder, the CLI.

Only conftest.py turns these into fixtures; nothing here imports conftest.
"""
