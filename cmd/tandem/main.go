// Command tandem indexes document collections and searches them with BM25,
// dense and late-interaction retrieval, fused into one ranking.
//
// Each subcommand lives in its own file and is listed in commands below; the
// command layer only parses flags and calls the library.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// command is one subcommand: run parses args and does the work, writing
// results to stdout and progress to stderr.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// commands is the table of subcommands.
func commands() map[string]command {
	cmds := map[string]command{
		"version": {"print the version and native library locations", runVersion},
		"serve":   {"serve the collections of a data directory over HTTP (JSON API, metrics, web page)", runServe},
		"torture": {"SIGKILL a writer at random moments, then check the collection against its ledger", runTorture},
		"soak":    soakCommand,
		"cluster": clusterCommand,
	}
	// Each group lives in its own file, owned by the area it drives.
	for _, group := range []map[string]command{collectionCommands(), modelCommands(), benchCommands()} {
		maps.Copy(cmds, group)
	}
	return cmds
}

// errUsage marks an error already explained by printed usage.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tandem: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "tandem %s: %v\n", args[0], err)
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Tandem: embeddable hybrid search (BM25 + dense + late interaction).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: tandem <command> [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, n := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'tandem <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tandem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// repeated defines a flag that may be given several times, each value
// read by parse, and returns the values given.
func repeated[T any](fs *flag.FlagSet, name, usage string, parse func(string) (T, error)) *[]T {
	var values []T
	fs.Func(name, usage, func(s string) error {
		v, err := parse(s)
		if err == nil {
			values = append(values, v)
		}
		return err
	})
	return &values
}

// nonEmpty is a flag value that must not be blank: a key.
func nonEmpty(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", errors.New("empty key")
	}
	return s, nil
}

// parseOrUsage parses args as parseFlags does, then prints the command's
// usage line and returns errUsage when missing reports that a required
// flag or argument is missing or out of range.
func parseOrUsage(fs *flag.FlagSet, args []string, stderr io.Writer, usage string, missing func() bool) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if missing() {
		fmt.Fprintln(stderr, "usage: "+usage)
		return errUsage
	}
	return nil
}

// parseFlags parses args, turning a flag error into errUsage (the flag
// package has already printed it).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
