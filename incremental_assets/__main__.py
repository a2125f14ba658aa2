import sys

from incremental_assets.cli import main

sys.exit(main())
