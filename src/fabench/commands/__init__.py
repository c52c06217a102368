"""The `fabench` command's subcommands, one module each (as asv's asv/commands/): archive (store, list,
verify), compare and detector-check; common holds what they share (the parser, the argument types, the
exit codes). fabench.cli assembles them into the one command line."""
