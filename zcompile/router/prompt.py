"""What zc says to a model when it asks one decision: the system prompt and the answer instructions."""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = (
    "You choose the next action of an agent. Choose exactly one of the offered actions; "
    "never invent an action that is not offered. Do not explain.")
MODE_INSTRUCTION = {
    "tools": "Answer by calling the tool of the action you choose.",
    "json_schema": 'Answer with a JSON object {"action": "<one of the offered actions>"}.',
    "json_object": 'Answer with a JSON object {"action": "<one of the offered actions>"}.',
}
OFFERED = "Offered actions (choose exactly one):"

# all of it: a reply must never quote it (the grader's `leak` check)
SCAFFOLDING = (DEFAULT_SYSTEM_PROMPT, *dict.fromkeys(MODE_INSTRUCTION.values()), OFFERED)


def system_prompt(mode: str) -> str:
    """The system prompt of a decision asked in `mode` (`tools`, `json_schema`, `json_object`)."""
    return f"{DEFAULT_SYSTEM_PROMPT} {MODE_INSTRUCTION[mode]}"
