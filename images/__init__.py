"""Image recipes and the admin side of `sprawl-orch image`."""
