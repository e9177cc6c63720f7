"""The ground floor: values and primitives every room stands on (errors, the assurances and
arm names, credentials, the unrunnable refusal, shell words, the file clock, open-beneath).
Imports nothing else of sprawl_orch."""
