from bundlectl.cli import entry

entry()
