"""The model wing: the ``chat`` activity and everything one model call needs (client, prompts,
context budget, token preview, telemetry). Kept together because a change to how we talk to a
provider should touch one folder."""
