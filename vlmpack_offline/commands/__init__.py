"""One module per subcommand: this folder is the CLI's table of contents."""
