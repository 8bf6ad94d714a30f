from bundlectl.cli.main import entry

entry()
