"""`python -m incremental_assets`: the `incremental-assets` command."""

import sys

from incremental_assets.cli import main

sys.exit(main())
