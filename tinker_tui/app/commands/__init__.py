"""One module per `tinker-tui` sub-command; each has `add_parser(subparsers)` and `main(args)`."""
