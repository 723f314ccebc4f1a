package main

import (
	"strings"
	"testing"
)

// tandem torture refuses bad flags before it starts a writer, naming the
// flag; the hidden writer entry (torture --writer) refuses a call without
// its directory and ledger.
func TestTortureFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"torture", "extra"}, 1, `tandem torture: unexpected argument "extra"`},
		{[]string{"torture", "--kills", "-1"}, 1, "tandem torture: --kills -1: want a positive count"},
		{[]string{"torture", "--duration", "-1s"}, 1, "tandem torture: --duration -1s: want a positive duration"},
		{[]string{"torture", "--ids", "0"}, 1, "tandem torture: --ids 0: want a positive count"},
		{[]string{"torture", "--max-batch", "-2"}, 1, "tandem torture: --max-batch -2: want a positive count"},
		{[]string{"torture", "--close-every", "0"}, 1, "tandem torture: --close-every 0: want a positive count"},
		{[]string{"torture", "--late-index", "IVF"}, 1, `tandem torture: --late-index "IVF": want "Residual" or "FAISS"`},
		{[]string{"torture", "--bogus"}, 1, "flag provided but not defined: -bogus"},
		{[]string{"torture", "-h"}, 0, "-close-every"},
		{[]string{"torture", "--writer"}, 1, "tandem torture: torture --writer: --dir, --ledger, and positive --ids, --max-batch, --close-every are required"},
		{[]string{"torture", "--writer", "--dir", "d", "--ledger", "l", "--ids", "0"}, 1, "are required"},
		{[]string{"torture", "--writer", "--bogus"}, 1, "flag provided but not defined: -bogus"},
	} {
		code, out, errs := tandemRun(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want code %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
		// A flag error is explained by the flag package's usage alone.
		if strings.Contains(tc.want, "not defined") && strings.Contains(errs, "tandem torture: flag") {
			t.Errorf("%v: the flag error is reported twice: %q", tc.args, errs)
		}
	}
}
