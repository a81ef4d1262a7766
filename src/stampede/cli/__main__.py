"""`python -m stampede.cli`: the same as the `stampede` command."""

from . import main

main()
