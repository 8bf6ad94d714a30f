"""Privacy: what an agent's model is shown of the values a tool call carries. Detectors find
personal data in results and arguments (`tokenize`, with the checksums of `checks`), a
per-agent map replaces each value with a token and restores it on the way to a server, and the
maps replicas share through the state store are encrypted and keyed (`tokens`). The gateway,
code mode's runtime and the state store use it."""
