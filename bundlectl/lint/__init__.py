"""`bundlectl lint`: validate and analyse configs, manifests and locks, for CI.

`rules.py` is the table of rules; `checks_*.py` hold the small functions that find them;
`engine.py` runs them over the files; `suppress.py` applies `# bundlectl: ignore[...]`;
`formats.py` renders text, json, sarif and github annotations.
"""
