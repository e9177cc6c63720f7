"""One run's life on this machine: launch and results, the backlog and its shares, ceiling and
affinity, cgroups, process groups, yielding, the ledger and the guardian client."""
