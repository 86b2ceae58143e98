"""The one error of a training config."""


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message is one line."""
