package main

// collectionCommands are the subcommands that index, search, evaluate and
// maintain a collection directory.
func collectionCommands() map[string]command {
	return map[string]command{}
}
