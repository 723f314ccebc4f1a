package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tandemsearch/tandem/engine"
)

func runDelete(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("delete", stderr)
	dir := fs.String("dir", "", "collection directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: tandem delete --dir DIR ID...")
		return errUsage
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	r, err := e.Delete(context.Background(), fs.Args())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d of %d ids\n", r.Deleted, fs.NArg())
	return nil
}
