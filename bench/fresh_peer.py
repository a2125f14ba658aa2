"""One peer's incremental run in a process of its own: what its user pays per scheduled run.

    python -m bench.fresh_peer ENGINE WORKDIR PG_URL SINCE

ENGINE is `adbc` (reads `updated_at > SINCE` into one zstd Parquet file) or `dlt` (its
incremental `sql_table`, which keeps its own cursor under WORKDIR, so SINCE is unused). The run is
`incremental` of bench/engines.py, started from nothing: the interpreter, the imports, the
connection. Prints one JSON line: the rows read and the files written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.engines import ENGINES


def main() -> None:
    name, workdir, pg_url, since = sys.argv[1:5]
    Path(workdir).mkdir(parents=True, exist_ok=True)
    engine = ENGINES[name](Path(workdir), pg_url, {})
    print(json.dumps(engine.incremental(since)), flush=True)


if __name__ == "__main__":
    main()
