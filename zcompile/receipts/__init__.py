"""Receipts: the logged-decision format, its files, and the importers that make them."""

from .bfcl import bfcl_answers_path, canonical_arguments, import_bfcl
from .candidates import Candidate, extract_candidates
from .chat import (
                   EXTRACT_VERSION,
                   SHAPES,
                   TOOL_TEXT_LIMIT,
                   ChatSummary,
                   call_arguments,
                   default_extract,
                   import_chat,
                   load_extractor,
)
from .format import FORMAT_MAJOR, FORMAT_VERSION, Receipt, ReceiptError
from .io import GZIP_MAGIC, PROBLEMS_KEPT, ReadStats, ReceiptWriter, encode, expand, read, write_file

__all__ = ["Candidate", "extract_candidates", "EXTRACT_VERSION", "FORMAT_MAJOR", "FORMAT_VERSION",
           "GZIP_MAGIC", "PROBLEMS_KEPT", "SHAPES", "TOOL_TEXT_LIMIT", "ChatSummary", "ReadStats", "Receipt",
           "ReceiptError", "ReceiptWriter", "bfcl_answers_path", "call_arguments", "canonical_arguments",
           "default_extract", "encode", "expand", "import_bfcl", "import_chat", "load_extractor", "read",
           "write_file"]
