"""The test files (or single tests, by node id) marked `slow` (tests/conftest.py applies the mark).

`pytest -m "not slow"` leaves them out for a quick local run; CI runs everything. A file is here
for what it does (a figure where `pytest --durations` measured one, on 2 loaded cores): each
drives a real engine or sandbox many times over (the escape matrix, the conformance suites, chaos
loops, load), builds images, or runs another program's whole life (benchmarks, gVisor's runsc, a
rootless user's engines). A single slow test elsewhere may carry `@pytest.mark.slow` itself
(test_images.py's debootstrap).
"""

from __future__ import annotations

SLOW_FILES: dict[str, str] = {
    "tests/escapes": "every probe class against every arm, on the real engines",
    "tests/integration/test_conformance_container.py": "the conformance suite per engine",
    "tests/integration/test_conformance_native.py": "the conformance suite per native arm",
    "tests/integration/test_conformance_userns.py": "the conformance suite under userns",
    "tests/integration/test_apply_chaos.py": "fault loops over apply",
    "tests/integration/test_cli_chaos.py": "fault loops over the CLI",
    "tests/integration/test_guardian_chaos.py": "kills at every step of the guardian's life",
    "tests/integration/test_serve_load.py": "many concurrent callers of serve (200 commands: 53 s)",
    "tests/integration/test_mcp_real.py::test_soak_200_calls_leave_nothing": "200 MCP calls: 52 s",
    "tests/integration/test_egress_pip_containers.py": "builds the python recipe (debootstrap)",
    "tests/integration/test_egress_flood.py": "300 tunnels from one bwrap command: 46 s",
    "tests/integration/test_secrets_image_real.py": "builds the python recipe with curl",
    "tests/integration/test_image_cas_hostile.py": "imports 20 hostile images per engine: 63 s",
    "tests/integration/test_gvisor_arm.py": "runsc per command",
    "tests/integration/test_gvisor_runsc.py": "runsc per command",
    "tests/integration/test_rootless.py": "a rootless user's engines set up and used",
    "tests/integration/test_benchmarks_run.py": "runs the benchmarks",
    "tests/integration/test_images_python.py": "debootstrap images (also marked in the file)",
    "tests/integration/test_python_tiering.py": "a Winch and a Cranelift compile of 26 MB: 20-90 s",
    "tests/integration/test_python_tiering_attack.py": "background compiles of 26 MB: 60-200 s",
    "tests/integration/test_release.py": "builds the sdist and wheel, installs into a fresh venv",
    "tests/integration/test_action.py": "installs the GitHub Action as a runner account, runs it",
    "tests/integration/test_action_attacks.py": "the Action under hostile inputs: 73 s",
}
