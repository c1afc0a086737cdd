"""`python -m zcompile`: the `zc` command line."""

from .cli import main

main()
