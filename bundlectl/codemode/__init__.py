"""Code mode (SPEC 9): typed functions generated per tool, the runtime they call through
(`bundlectl.client` is its public face), skills, and the privacy tokens that keep personal data
out of a model's context.
"""
