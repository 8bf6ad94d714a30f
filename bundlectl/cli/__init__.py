"""The command line: the typer app, its options and help, and the commands behind them."""
