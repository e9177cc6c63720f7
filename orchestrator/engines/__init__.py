"""The one docker/podman layer: the container arm (engine.py's ContainerEngine on docker.py,
podman.py), the guardian's sweep (sweep.py) and the image admin's store (images.py) all get their
backend from backends.py and run the CLI through engine.run_cli. Nothing here imports the docker
SDK at module level (the guardian's lean start, tests/unit/test_guardian_lean.py)."""
