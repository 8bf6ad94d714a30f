"""The project as files: the models of bundlectl.yaml and the lock, reading and editing them with
their comments, registries of bundles (folders, HTTPS indexes), paths and atomic writes.
"""
