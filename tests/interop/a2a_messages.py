"""What both a2a-sdk client scripts send (a2a_client.py, a2a_cluster_client.py)."""

import uuid

from a2a.types import Message, Part, Role


def message(text, skill, context=None):
    """A user message of `text` for `skill`, in `context` when given."""
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    m.metadata.update({"skill": skill})
    if context:
        m.context_id = context
    return m
