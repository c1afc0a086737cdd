"""Test order: modules with a `slow` test first, so that under pytest-xdist (`make test`) the long ones
start at once instead of ending the run alone on one core; the rest, and every module's own tests, in
file order."""

from __future__ import annotations


def pytest_collection_modifyitems(session, config, items) -> None:
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow") is not None}
    first = {}  # a module's place: its first test's
    for i, item in enumerate(items):
        first.setdefault(item.module.__name__, i)
    items.sort(key=lambda item: (item.module.__name__ not in slow, first[item.module.__name__]))
