"""Network by allow-list (issue 24): the host-side proxy a confined command reaches through a
listener inside its own network namespace. rules.py (the entries), addresses.py (which
resolved addresses are refused), proxy.py (HTTP CONNECT + plain HTTP forwarding),
hello.py (the TLS ClientHello's SNI), netns.py (the listener made inside a namespace)."""
