"""A custom chat template for the rollout tokenizer: what verl's `actor_rollout_ref.model.custom_chat_template` does.

The agent loop renders every prompt with `tokenizer.apply_chat_template(messages, tools=...)`, so replacing the
template is how a prompt protocol (e.g. python blocks instead of JSON tool calls) reaches the model without
touching the loop. In training, verl's `custom_chat_template` takes the same template text.
"""

from __future__ import annotations

from pathlib import Path

# A conversation with every role the agent loop appends: the template must render it without raising.
_PROBE = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
    {"role": "tool", "content": "t"},
]


def use_chat_template(tokenizer, template_path: Path):
    """Set `tokenizer.chat_template` to the Jinja template in `template_path`; returns the tokenizer."""
    if not template_path.is_file():
        raise FileNotFoundError(f"chat template not found: {template_path}")
    template = template_path.read_text(encoding="utf-8")
    if not template.strip():
        raise ValueError(f"chat template {template_path} is empty")
    try:
        tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True, chat_template=template)
    except Exception as exc:
        raise ValueError(f"chat template {template_path} does not render a tool conversation: {exc}") from exc
    tokenizer.chat_template = template
    return tokenizer
