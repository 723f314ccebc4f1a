package server

import (
	"fmt"
	"strings"
)

// ParseKeys reads a keys file (`tandem serve --keys-file`): one key a
// line, "admin KEY" for Config.AdminKeys or "read KEY" for
// Config.ReadKeys; blank lines and lines starting with '#' are ignored. An
// error names the line.
func ParseKeys(data []byte) (admin, read []string, err error) {
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, key, ok := strings.Cut(line, " ")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, nil, fmt.Errorf("line %d: want 'admin KEY' or 'read KEY'", i+1)
		}
		switch kind {
		case "admin":
			admin = append(admin, key)
		case "read":
			read = append(read, key)
		default:
			return nil, nil, fmt.Errorf("line %d: unknown kind %q (want admin or read)", i+1, kind)
		}
	}
	return admin, read, nil
}
