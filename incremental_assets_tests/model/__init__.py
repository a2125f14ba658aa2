"""Model-based test: random, reproducible sequences against a real PostgreSQL or MariaDB source
(or a folder of Parquet files) and the real assets, the lake checked against a reference model
after every run.

    table.py      the drawn table configuration, cursor values, and how the database compares them
    source.py     the source table the machine drives, written as applications write it
    source_postgres.py, source_mariadb.py   that table in each database
    source_files.py   that table as a folder of Parquet files (maps and arrays of structs)
    lake.py       the lake as its readers see it: pyarrow (plain Parquet) or PyIceberg (Iceberg)
    reference.py  the reference model: what the lake and the metadata must be
    runner.py     runs in process, killed subprocess runs, `incremental-assets cursor`, an Iceberg
                  table's maintenance between runs; the config's settings, the lake's place and
                  the Dagster home, as the machine sets them
    machine.py    the Hypothesis state machine that ties them together
    test_model.py the bounded run inside `make test`
    test_regressions.py  failing sequences the machine found, replayed step by step
    soak.py       `make soak SEED=... STEPS=... FORMAT=...`: as long as asked
"""
