package main

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
)

// modelCommands are the subcommands that list and run the installed
// encoder models.
func modelCommands() map[string]command {
	return map[string]command{
		"models": {"list the installed encoder models", runModels},
		"embed":  {"print the vector of a text as JSON", runEmbed},
	}
}

func runModels(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models", stderr)
	dir := fs.String("dir", engine.Native().Models, "models directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("no models directory: run scripts/setup.sh")
	}
	infos, err := encoder.List(*dir, nil)
	if err != nil {
		return err
	}
	if len(infos) == 0 {
		fmt.Fprintf(stderr, "no models in %s (run scripts/setup.sh)\n", *dir)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPRECISION\tDIM\tTOKEN DIM\tPOOLING\tSIMILARITY\tPATH")
	for _, in := range infos {
		name := in.Name
		if name == encoder.DefaultModel {
			name += " (default)"
		}
		// A configuration without "precision" does not say; show that
		// rather than guess float32.
		precision := cmp.Or(string(in.Precision), "-")
		if in.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\t%s\t%s\terror: %v\n", name, precision, in.Pooling, in.Similarity, in.Dir, in.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", name, precision, in.Dim, in.TokenDim, in.Pooling, in.Similarity, in.Dir)
	}
	return tw.Flush()
}
