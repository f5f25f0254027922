"""Typed stack configuration: the model, and loading it from stack files."""

from trainyard.config.load import ConfigError, load_stack, stack_path, validate_platform
from trainyard.config.model import GpuPool, PlatformConfig, Tenant

__all__ = ["ConfigError", "GpuPool", "PlatformConfig", "Tenant", "load_stack", "stack_path", "validate_platform"]
