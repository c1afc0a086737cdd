"""`zc mcp`: the MCP gateway's command (docs/mcp.md)."""

from __future__ import annotations

import importlib.util
import os

import click

from ..errors import ZcError
from .common import fail, load_policy, main, read_json


@main.command("mcp")
@click.option("--policy", "policy_path", required=True, type=click.Path(),
              help="Compiled policy (.zcp) or .zc source.")
@click.option("--server", "servers", multiple=True, required=True, metavar="[NAME=]COMMAND|URL",
              help="A server: a command started over stdio, or a Streamable HTTP URL; repeat for several "
                   "(then name each: NAME prefixes its tools as NAME.tool).")
@click.option("--http", "port", default=None, type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve Streamable HTTP on http://127.0.0.1:PORT/mcp (default: serve stdio).")
@click.option("--receipts", "receipts_path", default="mcp-receipts.jsonl", show_default=True,
              type=click.Path(dir_okay=False), help="Append one receipt per list and per call here.")
@click.option("--context", "context_path", default=None, metavar="FILE",
              help="Static state (a JSON object; `-` for stdin) added to what the calls derive.")
@click.option("--deny", default="result", show_default=True, type=click.Choice(["result", "error", "opaque"]),
              help="A blocked call: a tool result with isError and the reasons, a JSON-RPC error, or "
                   "isError without a reason.")
@click.option("--log-only", is_flag=True, help="Judge and record, but list every tool and forward every "
                                               "call.")
@click.option("--state-key", default="auto", show_default=True,
              metavar="auto|meta:KEY|header:NAME|auth|instance",
              help="How a 2026-07-28 request names its session (auto: the token's principal, else "
                   '_meta["io.zcompile/session"], else this gateway\'s one agent).')
@click.option("--intent", default=None, help="The policy intent every decision is taken under.")
@click.option("--extract", "extract_spec", default=None, metavar="MODULE:FUNCTION",
              help="State extractor (as for `zc receipts import --format chat`).")
@click.option("--timeout", "timeout_s", default=30.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True), help="Seconds a server has to answer one call "
                                                                "(and to connect).")
@click.option("--page-size", default=0, show_default=True, type=click.IntRange(min=0),
              help="Tools per tools/list page (0: one page).")
@click.option("--list-ttl-ms", default=0, show_default=True, type=click.IntRange(min=0),
              help="The ttlMs a tools/list result carries (cacheScope is always private).")
@click.option("--server-env", "server_env", multiple=True, metavar="VAR",
              help="Pass this environment variable on to the servers started over stdio (they get only "
                   "HOME, PATH and a few others otherwise); repeatable.")
@click.option("--auth-issuer", default=None, metavar="URL",
              help="With --http: act as an OAuth 2.1 resource server for tokens of this authorization "
                   "server.")
@click.option("--auth-resource", default=None, metavar="URL",
              help="This gateway's URL as tokens name it (their audience), e.g. https://host/mcp.")
@click.option("--auth-jwks", default=None, metavar="FILE|URL", help="The issuer's signing keys (a JWKS).")
@click.option("--auth-scope", "auth_scopes", multiple=True, metavar="SCOPE",
              help="A scope every token needs (403 without).")
def mcp_cmd(policy_path, servers, port, receipts_path, context_path, deny, log_only, state_key, intent,
            extract_spec, timeout_s, page_size, list_ttl_ms, server_env, auth_issuer, auth_resource,
            auth_jwks, auth_scopes) -> None:
    """Serve MCP in front of MCP servers: tools/list answers the tools legal in this session's state,
    and every tools/call is judged by the policy before it reaches a server (docs/mcp.md)."""
    try:
        import anyio

        from ..mcp import McpGateway, ServerSpec
        from ..mcp.serve import run_http, run_stdio
    except ImportError as exc:
        fail(ZcError(f"zc mcp needs the `mcp` extra ({exc.name} is not installed): pip install "
                     "'zcompile[mcp]'"))
    from ..receipts import default_extract, load_extractor

    auth = (auth_issuer, auth_resource, auth_jwks)
    if any(auth) and not all(auth):
        raise click.UsageError("an OAuth resource server needs --auth-issuer, --auth-resource and "
                               "--auth-jwks")
    if any(auth) and port is None:
        raise click.UsageError("--auth-* apply to the HTTP door: add --http PORT")
    settings = verifier = None
    try:
        if all(auth):
            from ..mcp.auth import resource_server

            settings, verifier = resource_server(issuer=auth_issuer, resource=auth_resource, jwks=auth_jwks,
                                                 scopes=list(auth_scopes))
        policy = load_policy(policy_path)
        context = read_json(context_path) if context_path else None
        if context is not None and not isinstance(context, dict):
            raise ZcError(f"{context_path}: $: expected a JSON object of state fields")
        extract = load_extractor(extract_spec) if extract_spec else default_extract
        missing = [v for v in server_env if v not in os.environ]
        if missing:
            raise ZcError(f"--server-env {missing[0]}: not set in this environment")
        env = {v: os.environ[v] for v in server_env} or None
        gateway = McpGateway(policy, [ServerSpec.parse(s, env) for s in servers], extract=extract,
                             context=context, receipts=receipts_path, deny=deny, log_only=log_only,
                             state_key=state_key, timeout_s=timeout_s, page_size=page_size,
                             list_ttl_ms=list_ttl_ms, intent=intent)
    except ZcError as exc:
        fail(exc)
    where = f"http://127.0.0.1:{port}/mcp" if port is not None else "stdio"
    click.echo(f"zc mcp: policy {policy.name}, {len(servers)} server(s), receipts {receipts_path}; {where}",
               err=True)
    if port is not None:
        click.echo(f"zc mcp: {gateway.key_announcement(authenticated=all(auth))}", err=True)
    try:
        if port is None:
            anyio.run(run_stdio, gateway)
        else:
            # uvloop when installed (the `serve` extra), as uvicorn picks it for zc serve and zc pdp
            uvloop = importlib.util.find_spec("uvloop") is not None
            anyio.run(lambda: run_http(gateway, port, auth=settings, token_verifier=verifier),
                      backend_options={"use_uvloop": uvloop})
    except ZcError as exc:
        fail(exc)
    except BaseExceptionGroup as group:  # a server failing to start, from inside the task group
        from ..mcp.upstream import user_error

        err = user_error(group)
        if not isinstance(err, ZcError):
            raise
        fail(err)
    except KeyboardInterrupt:
        pass
    finally:
        gateway.close()
