"""The thin `sprawl-orch exec` client and what it shares with the server: standard library only
(tests/unit/test_exec_client.py checks that no click, pydantic, docker or rich is imported)."""
