package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyLogs deletes the empty value-log (.vlog) and memtable (.mem)
// files of the Badger directory dir. Badger creates each such file empty,
// then sizes it and writes its header, and it starts a new value log at
// every Open: a process killed in between leaves an empty file, which
// Badger v4 then refuses to open ("Open existing file ... Create a new
// file"). An empty file holds no header and no entry, so nothing refers to
// it and Badger starts a new one in its place. tandem torture found it;
// TestOpenAfterKillInLogCreation checks it.
func removeEmptyLogs(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".vlog") && !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		if info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("storage: remove the empty log file a crash left: %w", err)
			}
		}
	}
	return nil
}
