"""`python -m zcompile.lsp`: the language server on stdio."""

from .server import main

main()
