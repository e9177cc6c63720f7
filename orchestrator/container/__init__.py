"""The container arm (design §3): engines, admission, create argv, inspect verification.

Modules, one idea each:

- `engine`    the small backend interface (`ContainerEngine`, `EngineFacts`, `Attached`), the
              CLI runner and the engines' vocabulary (ENGINES, IMAGE_ID, ZERO_TIME), defined once
- `docker`    docker: SDK for facts/inspect/start/wait/logs/remove, CLI for create
- `podman`    podman: CLI JSON only (no service socket runs on these hosts)
- `argv`      the host's limits, the fitted limits and the ONE create argv function (pure)
- `verify`    inspect verification before start (pure comparison)
- `admission` evidence-only admission with runtime fallback, cached per process
- `ownership` the copy is made writable for the container user
- `run`       `ContainerRun`: the `Running` of one container
- `arm`       `ContainerArm`: the `Arm` protocol over all of the above
- `command`   the command's env, host venv, start refusal and quiet removal (arm and warm)
- `offer`     admissions reduced to `EngineOffer`s for `Offerings`

Nothing here imports the docker SDK at module import time: the CLI must not pay
~200 ms before doing anything.
"""
