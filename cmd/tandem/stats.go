package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/tandemsearch/tandem/engine"
)

func runStats(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stats", stderr)
	dir := fs.String("dir", "", "collection directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "usage: tandem stats --dir DIR")
		return errUsage
	}
	e, err := engine.Open(*dir, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	s, err := e.Stats()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
