package main

// collectionCommands are the subcommands that index, search, evaluate and
// maintain a collection directory.
func collectionCommands() map[string]command {
	return map[string]command{
		"index":   {"index a JSONL corpus (BEIR or JSON objects) into a collection", runIndex},
		"search":  {"search a collection", runSearch},
		"eval":    {"evaluate a collection on BEIR queries and qrels", runEval},
		"tune":    {"choose fusion method, weights and depth on judged queries", runTune},
		"delete":  {"delete documents by id", runDelete},
		"stats":   {"print a collection's counts, sequences and schema", runStats},
		"export":  {"write a collection's stored dense vectors as NumPy arrays, with their ids", runExport},
		"backup":  {"write a consistent copy of a collection to a file (length and SHA-256 checked on restore)", runBackup},
		"restore": {"create a collection from a backup file, after checking it", runRestore},
	}
}
