"""CLI: ``python -m gliding_core.cli`` runs the ``gliding-horse`` command."""

import sys

from gliding_core.cli.command import main

sys.exit(main())
