"""`zc mcp`: an MCP gateway that lists only legal tools and judges every call (the `mcp` extra)."""

from .gateway import DENY_MODES, POLICY_DENIED, VERDICT_META, McpGateway
from .upstream import ServerSpec

__all__ = ["DENY_MODES", "POLICY_DENIED", "VERDICT_META", "McpGateway", "ServerSpec"]
