"""The podcast's voices (activities/content/speech.py): an OpenAI-compatible speech endpoint, or
DeerFlow's Volcengine TTS."""

from __future__ import annotations

from pydantic import Field

from config.groups.base import SettingsGroup


class SpeechSettings(SettingsGroup):
    """Text to speech; with neither endpoint, the podcast is a script only."""

    # The podcast's voices (activities/content/speech.py): an OpenAI-compatible /v1/audio/speech endpoint
    # (base URL up to /v1), its key, model and one voice per speaker. Unset: no voice, script only.
    tts_url: str | None = Field(default=None, pattern=r"^https?://", alias="DEERFLOW_TTS_URL")
    tts_api_key: str | None = Field(default=None, alias="DEERFLOW_TTS_API_KEY")
    tts_model: str = Field(default="tts-1", alias="DEERFLOW_TTS_MODEL")
    tts_voice_male: str = Field(default="onyx", alias="DEERFLOW_TTS_VOICE_MALE")
    tts_voice_female: str = Field(default="nova", alias="DEERFLOW_TTS_VOICE_FEMALE")
    tts_timeout: float = Field(default=60.0, gt=0, le=600, alias="DEERFLOW_TTS_TIMEOUT")
    # DeerFlow's Volcengine TTS settings, used when DEERFLOW_TTS_URL is unset (its podcast voices).
    volcengine_tts_appid: str | None = Field(default=None, alias="VOLCENGINE_TTS_APPID")
    volcengine_tts_access_token: str | None = Field(default=None, alias="VOLCENGINE_TTS_ACCESS_TOKEN")
    volcengine_tts_cluster: str = Field(default="volcano_tts", alias="VOLCENGINE_TTS_CLUSTER")
    volcengine_tts_url: str = Field(default="https://openspeech.bytedance.com/api/v1/tts", pattern=r"^https?://",
                                    alias="DEERFLOW_VOLCENGINE_TTS_URL")
