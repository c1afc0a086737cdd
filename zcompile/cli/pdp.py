"""`zc pdp`: the policy as an AuthZEN Authorization API 1.0 decision point (docs/authzen.md)."""

from __future__ import annotations

import os

import click

from ..errors import ZcError
from .common import fail, load_policy, main


@main.command("pdp")
@click.option("--policy", "policy_path", required=True, type=click.Path(),
              help="Compiled policy (.zcp) or .zc source.")
@click.option("--mapping", "mapping_path", default=None, type=click.Path(dir_okay=False),
              help="Mapping file (YAML or JSON): request -> the policy's action, state, intent, arguments.")
@click.option("--reasons", default="full", show_default=True, type=click.Choice(["full", "none"]),
              help="Every reason in a denial's context, or bare decisions (rules not revealed).")
@click.option("--pdp-url", default=None, metavar="URL",
              help="The `policy_decision_point` of the discovery document (default: the URL requested).")
@click.option("--api-key-env", default=None, metavar="VAR",
              help="Environment variable holding the key every request must present (Authorization).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8089, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@click.option("--max-body-bytes", default=1024 * 1024, show_default=True, type=click.IntRange(min=1),
              help="Larger request bodies are refused (413).")
@click.option("--max-page", default=1000, show_default=True, type=click.IntRange(min=1),
              help="The most results one search page holds.")
@click.option("--check", "check_only", is_flag=True, help="Validate the policy and the mapping, then exit.")
def pdp_cmd(policy_path, mapping_path, reasons, pdp_url, api_key_env, host, port, max_body_bytes, max_page,
            check_only) -> None:
    """Serve the AuthZEN Authorization API 1.0 (evaluation, evaluations, searches) decided by the
    policy, on 127.0.0.1 by default (docs/authzen.md)."""
    try:
        from ..authzen import PDP, create_app, load_mapping
        from ..gateway.server import serve
    except ImportError as exc:
        fail(ZcError(f"zc pdp needs the `serve` extra ({exc.name} is not installed): pip install "
                     "'zcompile[serve]'"))
    try:
        policy = load_policy(policy_path)
        mapping = load_mapping(mapping_path, policy)
        api_key = None
        if api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ZcError(f"--api-key-env: the environment variable `{api_key_env}` is not set or empty")
        pdp = PDP(policy, mapping, reasons=reasons, max_page=max_page)
    except ZcError as exc:
        fail(exc)
    searches = ", ".join(k for k, v in pdp.searches.items() if v)
    if check_only:
        click.echo(f"policy {policy.name}, mapping {mapping.name}: {len(mapping.actions)} actions, searches: "
                   f"{searches}")
        return
    click.echo(f"zc pdp: policy {policy.name}, mapping {mapping.name}, searches: {searches}; "
               f"http://{host}:{port}/.well-known/authzen-configuration", err=True)
    try:
        serve(create_app(pdp, pdp_url=pdp_url, api_key=api_key, max_body_bytes=max_body_bytes), host, port)
    except ZcError as exc:
        fail(exc)
