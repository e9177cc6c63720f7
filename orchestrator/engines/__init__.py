"""The docker/podman engine interface (engine.py) that the container arm, config, the guardian
and the image admin share."""
