package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/engine"
)

func runBackup(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup", stderr)
	dir := fs.String("dir", "", "collection directory")
	out := fs.String("out", "", "backup file to write (replaced whole, or left as it was)")
	if err := parseOrUsage(fs, args, stderr, "tandem backup --dir DIR --out FILE", func() bool { return *dir == "" || *out == "" || fs.NArg() > 0 }); err != nil {
		return err
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	info, err := e.BackupFile(context.Background(), *out)
	if err == nil {
		fmt.Fprintf(stdout, "backed up %s to %s: %d bytes, SHA-256 %s\n", *dir, *out, info.Bytes, info.SHA256)
	}
	return err
}

func runRestore(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("restore", stderr)
	from := fs.String("from", "", "backup file (tandem backup), checked whole before use")
	dir := fs.String("dir", "", "collection directory to create; must not exist or be empty")
	if err := parseOrUsage(fs, args, stderr, "tandem restore --from FILE --dir DIR", func() bool { return *dir == "" || *from == "" || fs.NArg() > 0 }); err != nil {
		return err
	}
	if cluster.IsNodeBackup(*from) { // tandem cluster backup's
		err := cluster.RestoreNode(*from, *dir)
		if err == nil {
			fmt.Fprintf(stdout, "restored the node backup %s into %s; start the node with --join MEMBER: it rejoins its groups and catches up\n", *from, *dir)
		}
		return err
	}
	info, err := engine.Restore(*from, *dir)
	if err == nil {
		fmt.Fprintf(stdout, "restored %s into %s (%d bytes, SHA-256 %s checked); its indexes are rebuilt when it is first opened\n", *from, *dir, info.Bytes, info.SHA256)
	}
	return err
}
