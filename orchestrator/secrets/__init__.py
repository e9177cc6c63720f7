"""Secrets the command never sees (issue 25): a placeholder in its environment, the real value
put into requests by the egress proxy for the hosts bound to it (docs/secrets.md)."""
