package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A create names models only by the names of the models installed in
// the server's models directory: a path, "..", or a name that is not
// installed is 400 bad_model naming the field, and the answer lists the
// installed names, never a path of the server (issue 27: an absolute path
// loaded any model directory on disk, and "../../../../etc" answered "no
// configuration file: ../../../../etc/tandem.json").
func TestModelNamesNotPaths(t *testing.T) {
	models, err := filepath.Abs(filepath.Join("..", "encoder", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TANDEM_MODELS", models) // tiny-bert (dense, 4), tiny-colbert (late only), tiny-t5
	a := newAPIServer(t, nil)
	// noPath checks the answer shows no path but the name the client
	// gave, quoted.
	noPath := func(eb errorBody, given string) {
		t.Helper()
		msg := strings.ReplaceAll(eb.Error.Message, strconv.Quote(given), "")
		for _, p := range []string{models, a.dir, "etc", "tandem.json"} {
			if strings.Contains(msg, p) {
				t.Errorf("the answer shows a path of the server (%s): %q", p, eb.Error.Message)
			}
		}
	}
	for _, tc := range []struct {
		body         map[string]any
		field, given string
	}{
		{map[string]any{"dense": []string{filepath.Join(models, "tiny-bert")}}, "dense[0]", filepath.Join(models, "tiny-bert")},
		{map[string]any{"dense": []string{"../../../../etc"}}, "dense[0]", "../../../../etc"},
		{map[string]any{"late": []string{"tiny-colbert", ".."}}, "late[1]", ".."},
		{map[string]any{"dense": []string{"."}}, "dense[0]", "."},
		{map[string]any{"dense": []string{"tiny-bert", "tiny-bert/"}}, "dense[1]", "tiny-bert/"},
		{map[string]any{"dense": []string{" tiny-bert"}}, "dense[0]", " tiny-bert"},
		{map[string]any{"dense": []string{strings.Repeat("a", 129)}}, "dense[0]", strings.Repeat("a", 129)},
		{map[string]any{"schema": map[string]any{"models": []map[string]any{{"name": "..", "dense": true, "dim": 4}}}}, "schema.models[0].name", ".."},
	} {
		eb := a.fails(http.StatusBadRequest, "bad_model", "PUT", "/v1/collections/p1", tc.body, tc.field+": model name "+strconv.Quote(tc.given), "installed: tiny-bert, tiny-colbert, tiny-t5")
		noPath(eb, tc.given)
	}
	// A plain name that is not installed, in the models directory or
	// beside the server: the installed names, not the directory.
	if err := os.Mkdir(filepath.Join(a.dir, "stray"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		body         map[string]any
		field, given string
	}{
		{map[string]any{"dense": []string{"no-such-model"}}, "dense[0]", "no-such-model"},
		{map[string]any{"late": []string{"stray"}}, "late[0]", "stray"},
		{map[string]any{"schema": map[string]any{"models": []map[string]any{{"name": "no-such-model", "late": true, "token_dim": 4}}}}, "schema.models[0].name", "no-such-model"},
	} {
		noPath(a.fails(http.StatusBadRequest, "bad_model", "PUT", "/v1/collections/p1", tc.body,
			tc.field+": model "+strconv.Quote(tc.given)+" is not installed on this server (installed: tiny-bert, tiny-colbert, tiny-t5)"), tc.given)
	}
	// An installed model that cannot serve what is asked, or of another
	// dimension than the schema says: refused, still without a path.
	noPath(a.fails(http.StatusBadRequest, "bad_model", "PUT", "/v1/collections/p1", map[string]any{"dense": []string{"tiny-colbert"}}, `"tiny-colbert"`, "pools no vector"), "")
	noPath(a.fails(http.StatusBadRequest, "bad_model", "PUT", "/v1/collections/p1",
		map[string]any{"schema": map[string]any{"models": []map[string]any{{"name": "tiny-bert", "dense": true, "dim": 5}}}}, `"tiny-bert"`, "collection p1"), "")
	if _, err := os.Stat(filepath.Join(a.dir, "p1")); !os.IsNotExist(err) {
		t.Errorf("a refused create left %s behind: %v", filepath.Join(a.dir, "p1"), err)
	}
	// The installed model by its name.
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/p1", map[string]any{"dense": []string{"tiny-bert"}, "late": []string{"tiny-colbert"}}, &ci)
	if len(ci.Retrievers) != 3 {
		t.Errorf("retrievers %v, want bm25, dense:tiny-bert and late:tiny-colbert", ci.Retrievers)
	}
}
