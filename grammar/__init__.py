"""The zc grammar, shipped inside the wheel as zcompile.grammar."""
