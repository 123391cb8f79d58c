"""Several Delegate services in one process: ``python -m delegate.host --services all``."""
