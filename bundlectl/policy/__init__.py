"""The policy engine (SPEC 3, 10): rules and where they were written, patterns, argument
conditions, the catalog of tools each rule matches, decisions and their explanations. Pure.
"""
