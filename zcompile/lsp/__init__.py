"""The zc language server (`zc lsp`, needs the `lsp` extra): diagnostics, hover, definitions, completion."""
