package latecollect

import (
	"os"
	"strconv"
)

// TANDEM_TWO_LEVEL_FROM and TANDEM_TWO_LEVEL_PROBE set, for measurements
// (the SciFact depth trace of a build at Open), the centroid count from
// which training and assignment are two-level and the groups a token
// probes.
func init() {
	if n, err := strconv.Atoi(os.Getenv("TANDEM_TWO_LEVEL_FROM")); err == nil && n > 0 {
		twoLevelFrom = n
	}
	if n, err := strconv.Atoi(os.Getenv("TANDEM_TWO_LEVEL_PROBE")); err == nil && n > 0 {
		twoLevelProbes = n
	}
}
