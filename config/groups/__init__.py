"""The settings by concern: one pydantic model per group, composed into ``config.settings.Settings``.

Each group declares its own fields (named by their env vars, through the alias) and the validators
and helpers that read only those fields; anything that reads two groups is on ``Settings`` itself.
The composed class is flat, so every ``settings.x`` attribute and every env name is unchanged.
"""
