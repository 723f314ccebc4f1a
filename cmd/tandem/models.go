package main

// modelCommands are the subcommands that list and run the installed
// encoder models.
func modelCommands() map[string]command {
	return map[string]command{}
}
