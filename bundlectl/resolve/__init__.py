"""A project resolved: versions picked for its bundles, bundles and the project's own
entries merged, and the lock and policy engine that implies.
"""
