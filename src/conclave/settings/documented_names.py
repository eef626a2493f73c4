"""The environment read by each setting's documented name only.

The settings classes accept their fields' Python names as well as their documented names
(``populate_by_name``), so code and tests can build settings with ``CommonSettings(auth=...)``.
pydantic-settings applies that to the environment too: a variable called plain ``AUTH``,
``OPERATORS`` or ``SERVICE_USERS`` — set for some other program on the same machine — turned
authentication off or made someone an operator (an outside attack found it). The environment
source below looks up the documented names (``CONCLAVE_AUTH``, ``CONCLAVE_OPERATORS``, …) alone.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource


class DocumentedNamesOnly(EnvSettingsSource):
    """pydantic-settings' environment source, never matching a variable to a field's Python
    name."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self.config = {**self.config, "populate_by_name": False, "validate_by_name": False}


def sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    dotenv_settings: PydanticBaseSettingsSource,
    file_secret_settings: PydanticBaseSettingsSource,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of a settings class, in pydantic-settings' order, the environment's replaced."""
    return init_settings, DocumentedNamesOnly(settings_cls), dotenv_settings, file_secret_settings


class DocumentedNamesSettings(BaseSettings):
    """A settings class whose environment is read by documented names only."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return sources(settings_cls, init_settings, dotenv_settings, file_secret_settings)
