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
	if err := parseOrUsage(fs, args, stderr, "tandem delete --dir DIR ID...", func() bool { return *dir == "" || fs.NArg() == 0 }); err != nil {
		return err
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
