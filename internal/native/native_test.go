package native

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// isolate clears every variable the lookups read and the linker-set
// prefix, points HOME at a temporary directory, and skips when the test
// binary itself sits below a .native directory (then Prefix cannot be
// emptied).
func isolate(t *testing.T) (home string) {
	t.Helper()
	for _, v := range []string{"TANDEM_NATIVE", "TANDEM_MODELS", "TANDEM_ONNXRUNTIME_LIB", "XDG_DATA_HOME", "XDG_DATA_DIRS", "LD_LIBRARY_PATH"} {
		t.Setenv(v, "")
	}
	old, oldRelease := builtinPrefix, releasePrefix
	builtinPrefix, releasePrefix = "", ""
	t.Cleanup(func() { builtinPrefix, releasePrefix = old, oldRelease })
	home = t.TempDir()
	t.Setenv("HOME", home)
	if p := Prefix(); p != "" {
		t.Skipf("skipping: the test binary sits below %s", p)
	}
	return home
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func touch(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrefixOrder(t *testing.T) {
	isolate(t)
	env, builtin := mkdir(t, t.TempDir(), "env"), mkdir(t, t.TempDir(), "builtin")

	builtinPrefix = filepath.Join(t.TempDir(), "missing")
	if p := Prefix(); p != "" {
		t.Fatalf("Prefix with a missing builtin prefix = %q, want none", p)
	}
	builtinPrefix = builtin
	if p := Prefix(); p != builtin {
		t.Fatalf("Prefix = %q, want the builtin %q", p, builtin)
	}
	// A release build's prefix is the executable's directory, ahead of
	// the builtin prefix; one that is not a directory is passed over.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		t.Fatal(err)
	}
	releasePrefix = "."
	if p := Prefix(); p != filepath.Dir(exe) {
		t.Fatalf("Prefix of a release build = %q, want the executable's directory %q", p, filepath.Dir(exe))
	}
	releasePrefix = "no-such-dir"
	if p := Prefix(); p != builtin {
		t.Fatalf("Prefix of a release build without its directory = %q, want the builtin %q", p, builtin)
	}
	releasePrefix = "."
	t.Setenv("TANDEM_NATIVE", env)
	if p := Prefix(); p != env {
		t.Fatalf("Prefix = %q, want $TANDEM_NATIVE %q", p, env)
	}
}

func TestModelsDirOrder(t *testing.T) {
	home := isolate(t)
	root := t.TempDir()
	prefix := filepath.Join(root, "prefix")
	xdgHome := filepath.Join(root, "xdg-home")
	dataA, dataB := filepath.Join(root, "data-a"), filepath.Join(root, "data-b")
	t.Setenv("XDG_DATA_HOME", xdgHome)
	t.Setenv("XDG_DATA_DIRS", dataA+string(os.PathListSeparator)+"relative/ignored"+string(os.PathListSeparator)+dataB)

	want := []string{
		filepath.Join(xdgHome, "tandem", "models"),
		filepath.Join(home, ".local", "share", "tandem", "models"),
		filepath.Join(dataA, "tandem", "models"),
		filepath.Join(dataB, "tandem", "models"),
		"/usr/local/share/tandem/models",
		"/usr/share/tandem/models",
	}
	if got := ModelDirs(); !slices.Equal(got, want) {
		t.Fatalf("ModelDirs without a prefix:\n got %q\nwant %q", got, want)
	}

	// With none of the temporary directories created, ModelsDir is a
	// system directory or nothing.
	if d := ModelsDir(); d != "" && d != want[4] && d != want[5] {
		t.Fatalf("ModelsDir with no candidate created = %q", d)
	}
	// Each candidate, once it exists, wins over every later one: create
	// them from last to first.
	for i := 3; i >= 0; i-- {
		mkdir(t, want[i])
		if d := ModelsDir(); d != want[i] {
			t.Fatalf("ModelsDir = %q, want %q (candidate %d)", d, want[i], i)
		}
	}
	// The prefix's models come first, once they exist.
	t.Setenv("TANDEM_NATIVE", prefix)
	if d := ModelsDir(); d != want[0] {
		t.Fatalf("ModelsDir with a prefix without models = %q, want %q", d, want[0])
	}
	mkdir(t, prefix, "models")
	if d := ModelsDir(); d != filepath.Join(prefix, "models") {
		t.Fatalf("ModelsDir = %q, want the prefix's models", d)
	}
	if got := ModelDirs(); got[0] != filepath.Join(prefix, "models") || !slices.Equal(got[1:], want) {
		t.Fatalf("ModelDirs with a prefix = %q", got)
	}
	// $TANDEM_MODELS is taken as given, even when it does not exist.
	override := filepath.Join(root, "override")
	t.Setenv("TANDEM_MODELS", override)
	if d := ModelsDir(); d != override {
		t.Fatalf("ModelsDir = %q, want $TANDEM_MODELS %q", d, override)
	}
}

func TestONNXRuntimeLibraryOrder(t *testing.T) {
	home := isolate(t)
	root := t.TempDir()
	system := ONNXRuntimeLibrary() // whatever ld.so.conf and /usr/lib hold

	user := touch(t, home, ".local", "lib", "libonnxruntime.so.1")
	if system == "" {
		if got := ONNXRuntimeLibrary(); got != user {
			t.Fatalf("ONNXRuntimeLibrary = %q, want the user's %q", got, user)
		}
	} else if got := ONNXRuntimeLibrary(); got != system {
		t.Fatalf("ONNXRuntimeLibrary = %q, want the system's %q before the user's", got, system)
	}

	// $LD_LIBRARY_PATH comes before the system directories, in its order;
	// in one directory the soname comes before the development link.
	ldA, ldB := mkdir(t, root, "ld-a"), mkdir(t, root, "ld-b")
	devLink := touch(t, ldB, "libonnxruntime.so")
	t.Setenv("LD_LIBRARY_PATH", ldA+string(os.PathListSeparator)+ldB)
	if got := ONNXRuntimeLibrary(); got != devLink {
		t.Fatalf("ONNXRuntimeLibrary = %q, want %q", got, devLink)
	}
	soname := touch(t, ldB, "libonnxruntime.so.1")
	if got := ONNXRuntimeLibrary(); got != soname {
		t.Fatalf("ONNXRuntimeLibrary = %q, want the soname %q", got, soname)
	}
	first := touch(t, ldA, "libonnxruntime.so")
	if got := ONNXRuntimeLibrary(); got != first {
		t.Fatalf("ONNXRuntimeLibrary = %q, want the first directory's %q", got, first)
	}

	// The prefix's lib comes before $LD_LIBRARY_PATH, once it holds the
	// library.
	prefix := mkdir(t, root, "prefix")
	t.Setenv("TANDEM_NATIVE", prefix)
	if got := ONNXRuntimeLibrary(); got != first {
		t.Fatalf("ONNXRuntimeLibrary with an empty prefix = %q, want %q", got, first)
	}
	inPrefix := touch(t, prefix, "lib", "libonnxruntime.so.1")
	if got := ONNXRuntimeLibrary(); got != inPrefix {
		t.Fatalf("ONNXRuntimeLibrary = %q, want the prefix's %q", got, inPrefix)
	}

	// $TANDEM_ONNXRUNTIME_LIB is taken as given.
	t.Setenv("TANDEM_ONNXRUNTIME_LIB", "/elsewhere/libonnxruntime.so.1")
	if got := ONNXRuntimeLibrary(); got != "/elsewhere/libonnxruntime.so.1" {
		t.Fatalf("ONNXRuntimeLibrary = %q, want $TANDEM_ONNXRUNTIME_LIB", got)
	}

	// The search list ends with the loader's defaults and the user's lib.
	dirs := LibraryDirs()
	if i, j := slices.Index(dirs, "/usr/lib"), slices.Index(dirs, filepath.Join(home, ".local", "lib")); i < 0 || j != len(dirs)-1 || i > j {
		t.Fatalf("LibraryDirs = %q: want /usr/lib, then ~/.local/lib last", dirs)
	}
}

func TestLdSoConf(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ld.so.conf")
	touchText := func(path, text string) {
		mkdir(t, filepath.Dir(path))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touchText(conf, "# comment\n/opt/first\ninclude ld.so.conf.d/*.conf\n  /opt/last  # trailing comment\nrelative/ignored\n")
	touchText(filepath.Join(root, "ld.so.conf.d", "b.conf"), "/opt/b\n")
	touchText(filepath.Join(root, "ld.so.conf.d", "a.conf"), "/opt/a1\n/opt/a2/\ninclude /nonexistent/*.conf\n")
	touchText(filepath.Join(root, "ld.so.conf.d", "loop.conf"), "include "+conf+"\n")
	got := ldSoConf(conf, 0)
	// loop.conf includes the top file again; the depth limit stops it, so
	// its directories repeat a bounded number of times. Check the first
	// pass and that it terminated.
	want := []string{"/opt/first", "/opt/a1", "/opt/a2", "/opt/b"}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) || got[len(got)-1] != "/opt/last" {
		t.Fatalf("ldSoConf = %q, want it to start with %q and end with /opt/last", got, want)
	}
	if got := ldSoConf(filepath.Join(root, "missing.conf"), 0); got != nil {
		t.Fatalf("ldSoConf of a missing file = %q", got)
	}
}
