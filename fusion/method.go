package fusion

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownMethod is returned by [ParseMethod] for a name it does not know.
var ErrUnknownMethod = errors.New("fusion: unknown method")

// Method selects how ranked lists are combined. The zero value is RRF.
type Method int

const (
	// RRF is reciprocal rank fusion: Σ 1/(K + rank). Weights are ignored.
	RRF Method = iota
	// WeightedRRF is Σ weight/(K + rank).
	WeightedRRF
	// MinMax is Σ weight·(s − min)/(max − min).
	MinMax
	// ZScore is Σ weight·(s − mean)/σ, σ the population standard deviation.
	ZScore
	// Max is Σ weight·s/max.
	Max
	// DBSF (distribution-based score fusion) is min-max with the limits
	// mean ± 3σ: Σ weight·(s − (mean − 3σ))/(6σ).
	DBSF
	// CombSUM is Σ of min-max normalised scores. Weights are ignored.
	CombSUM
	// CombMNZ is CombSUM times the number of lists that hold the doc.
	// Weights are ignored.
	CombMNZ
)

var methodNames = [...]string{
	RRF:         "rrf",
	WeightedRRF: "wrrf",
	MinMax:      "minmax",
	ZScore:      "zscore",
	Max:         "max",
	DBSF:        "dbsf",
	CombSUM:     "combsum",
	CombMNZ:     "combmnz",
}

// String returns the name [ParseMethod] accepts.
func (m Method) String() string {
	if m < 0 || int(m) >= len(methodNames) {
		return fmt.Sprintf("Method(%d)", int(m))
	}
	return methodNames[m]
}

// ParseMethod parses a method name as the CLI takes it: rrf, wrrf, minmax,
// zscore, max, dbsf, combsum or combmnz (case-insensitive).
func ParseMethod(name string) (Method, error) {
	for m, n := range methodNames {
		if strings.EqualFold(name, n) {
			return Method(m), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownMethod, name, strings.Join(methodNames[:], ", "))
}

// Methods lists every method, in the order of their constants.
func Methods() []Method {
	out := make([]Method, len(methodNames))
	for i := range out {
		out[i] = Method(i)
	}
	return out
}

// Weighted reports whether the method uses List.Weight.
func (m Method) Weighted() bool {
	return m != RRF && m != CombSUM && m != CombMNZ
}
