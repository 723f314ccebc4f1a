package encoder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/tandemsearch/tandem/internal/native"
)

// DefaultModel is the model used when none is named: bge-small-en-v1.5 in
// float32. Its int8 variant, "bge-small-en-v1.5-int8", is installed beside
// it and chosen by name; it is not the default because its dense nDCG@10
// on SciFact is 0.010 below float32's, outside the 0.005 the project
// allows for a default (docs/ingest.md).
const DefaultModel = "bge-small-en-v1.5"

// ErrNotInstalled means a named model is not in the models directory.
var ErrNotInstalled = errors.New("encoder: model not installed")

// Info describes an installed model.
type Info struct {
	Name       string
	Dir        string
	Pooling    Pooling
	Similarity Similarity
	// Precision is as tandem.json says; empty when it does not say.
	Precision Precision
	// Dim and TokenDim are as Encoder reports them; zero when Err is set.
	Dim, TokenDim int
	Source        string
	License       string
	// Err is set when the model does not load.
	Err error
}

// List loads each model directory under modelsDir (a subdirectory with a
// tandem.json) to report its dimensions, sorted by name. A model that
// fails to load is listed with Err set rather than failing the listing.
func List(modelsDir string, opts *Options) ([]Info, error) {
	entries, err := os.ReadDir(modelsDir)
	if err != nil {
		return nil, fmt.Errorf("encoder: list models: %w", err)
	}
	var out []Info
	for _, ent := range entries {
		dir := filepath.Join(modelsDir, ent.Name())
		if !ent.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err != nil {
			continue
		}
		info := Info{Name: ent.Name(), Dir: dir}
		cfg, err := ReadConfig(dir)
		if err != nil {
			info.Err = err
			out = append(out, info)
			continue
		}
		if cfg.Name != "" {
			info.Name = cfg.Name
		}
		info.Pooling, info.Similarity, info.Precision = cfg.Pooling, cfg.Similarity, cfg.Precision
		info.Source, info.License = cfg.Source, cfg.License
		var o Options
		if opts != nil {
			o = *opts
		}
		o.Config = cfg
		e, err := Load(dir, &o)
		if err != nil {
			info.Err = err
		} else {
			info.Dim, info.TokenDim = e.Dim(), e.TokenDim()
			e.Close()
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Installed names the models of the models directory (native.ModelsDir):
// its subdirectories that hold a configuration file, sorted. Each is a name
// Find looks up there. Without a models directory it is empty; a models
// directory that cannot be read is an error.
func Installed() ([]string, error) {
	models := native.ModelsDir()
	if models == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(models)
	if err != nil {
		return nil, fmt.Errorf("encoder: list models: %w", err)
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(models, e.Name(), ConfigFile)); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Find returns the directory of a model: name "" means DefaultModel; a
// name containing a path separator is used as it is; any other name is an
// installed model's, or else a directory of that name in the working
// directory. An installed model comes first, so a server that takes model
// names from clients loads only installed models by them.
func Find(name string) (string, error) {
	if name == "" {
		name = DefaultModel
	}
	if strings.ContainsRune(name, os.PathSeparator) {
		return name, nil
	}
	if models := native.ModelsDir(); models != "" {
		if dir := filepath.Join(models, name); fileExists(filepath.Join(dir, ConfigFile)) {
			return dir, nil
		}
	}
	if fi, err := os.Stat(name); err == nil && fi.IsDir() {
		return name, nil
	}
	models := native.ModelsDir()
	if models == "" {
		return "", fmt.Errorf("%w: %q: no models directory (searched %s; set TANDEM_MODELS, or %s)",
			ErrNotInstalled, name, strings.Join(native.ModelDirs(), ", "), installHint(name))
	}
	var have []string
	if entries, err := os.ReadDir(models); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				have = append(have, e.Name())
			}
		}
	}
	return "", fmt.Errorf("%w: %q in %s (installed: %s; %s)",
		ErrNotInstalled, name, models, strings.Join(have, ", "), installHint(name))
}

// Installable lists the models that scripts/setup-models.sh installs by
// name, in its order: DefaultModel, which scripts/setup.sh installs, then
// those it installs only when asked (make models installs all but the
// last, make models-extra the last).
var Installable = []string{
	DefaultModel, "all-MiniLM-L6-v2", "e5-small-v2",
	DefaultModel + "-int8", "all-MiniLM-L6-v2-int8", "e5-small-v2-int8",
	"answerai-colbert-small-v1",
}

// installHint names the command that installs model name.
func installHint(name string) string {
	if !slices.Contains(Installable, name) {
		return "docs/models.md says how to add a model"
	}
	return fmt.Sprintf("in a Tandem checkout `scripts/setup-models.sh %s` installs it into .native/models, and `make models` every model the tests use", name)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ParseModels reads a list of models separated by commas, the form of
// `tandem index --models`: NAME serves dense and late retrieval, dense:NAME
// or late:NAME one of them (a token-only model such as a ColBERT
// checkpoint is late:NAME), and "none" alone is no model.
func ParseModels(s string) (dense, late []string, err error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil, nil
	}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		kind, name, found := strings.Cut(n, ":")
		if !found {
			kind, name = "", n
		}
		if name == "" {
			return nil, nil, fmt.Errorf("empty name in %q", s)
		}
		switch kind {
		case "":
			dense, late = append(dense, name), append(late, name)
		case "dense":
			dense = append(dense, name)
		case "late":
			late = append(late, name)
		default:
			return nil, nil, fmt.Errorf("%q: want NAME, dense:NAME or late:NAME", n)
		}
	}
	return dense, late, nil
}
