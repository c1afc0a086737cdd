"""Reading YAML (or JSON) documents for zc's own files: YAML 1.2 scalars, no duplicate keys or
aliases, and a `$.path` placed at its file:line:column."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .errors import ZcError
from .source import Source


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """YAML 1.2 scalars: only true/false are booleans (an enum member `no` stays a string), and
        dates stay strings."""

    drop = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp"}
    Loader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag not in drop]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                 re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return Loader


def compose(text: str, name: str, what: str = "test file",
            empty: str = "a mapping with `version` and `cases`"):
    """(data, node tree) of a YAML (or JSON) document; ZcError with line:column otherwise. `what`
    names the kind of file in messages; `empty` what an empty one should have held."""
    import yaml

    try:
        loader = _yaml_loader()(text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, before any parsing
        line, col = Source(name, text).line_col(exc.position)
        raise ZcError(f"{name}:{line}:{col}: invalid YAML: the character U+{exc.character:04X} is not "
                      "allowed in YAML (control characters and lone surrogates)") from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise ZcError(f"{name}: empty {what}, expected {empty}")
        _no_duplicate_keys(node, name, what)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise ZcError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ZcError(f"{name}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ZcError(f"{name}: the document is nested too deeply") from None
    finally:
        loader.dispose()


class Refused(ZcError):
    """A well-formed document this format refuses (duplicate keys, aliases)."""


def _no_duplicate_keys(node, name: str, what: str) -> None:
    """Refuse duplicate keys (YAML would keep the last silently) and aliases."""
    import yaml

    stack, seen_nodes = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen_nodes:  # an alias: expanded, a few could stand for billions of values
            raise Refused(f"{name}:{n.start_mark.line + 1}:{n.start_mark.column + 1}: "
                          f"YAML anchors and aliases (`&`, `*`) are not supported in {what}s")
        seen_nodes.add(id(n))
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and k.value in seen:
                    raise Refused(f"{name}:{k.start_mark.line + 1}:{k.start_mark.column + 1}: "
                                  f"duplicate key `{k.value}`")
                if isinstance(k, yaml.ScalarNode):
                    seen.add(k.value)
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def locate(node: Any, path: str) -> tuple[int, int] | None:
    """The 1-based (line, column) of the node at a msgspec `$.a[0].b` path, as deep as it goes."""
    import yaml

    where = (node.start_mark.line + 1, node.start_mark.column + 1)
    for key, index, quoted in re.findall(r'\.([^.\[]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]', path):
        key = key or (msgspec.json.decode(quoted) if quoted else "")
        if key and isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == key), None)
            if hit is None:
                break
            node = hit[1]
            where = (hit[0].start_mark.line + 1, hit[0].start_mark.column + 1)
        elif index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
            where = (node.start_mark.line + 1, node.start_mark.column + 1)
        else:
            break
    return where
