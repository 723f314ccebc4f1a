package latecollect

import (
	"os"
	"strconv"
)

// TANDEM_TWO_LEVEL_FROM and TANDEM_TWO_LEVEL_PROBE set, for measurements
// (the SciFact depth trace of a build at Open), the centroid count from
// which tokens are coded in two levels and the groups a token probes;
// TANDEM_TWO_LEVEL_TRAIN_FROM and _TRAIN_PROBE the same for k-means, and
// TANDEM_TWO_LEVEL_TRAIN_EXACT the k-means iterations, at the end, that
// assign exactly; TANDEM_KMEANS_PER_CENTROID the training tokens per
// centroid and TANDEM_KMEANS_ITERATIONS the iterations.
func init() {
	for _, v := range []struct {
		env string
		p   *int
	}{
		{"TANDEM_TWO_LEVEL_FROM", &twoLevelFrom},
		{"TANDEM_TWO_LEVEL_PROBE", &twoLevelProbes},
		{"TANDEM_TWO_LEVEL_TRAIN_FROM", &twoLevelTrainFrom},
		{"TANDEM_TWO_LEVEL_TRAIN_PROBE", &twoLevelTrainProbes},
		{"TANDEM_TWO_LEVEL_TRAIN_EXACT", &twoLevelTrainExact},
		{"TANDEM_KMEANS_PER_CENTROID", &kmeansPerCentroid},
		{"TANDEM_KMEANS_ITERATIONS", &kmeansIters},
	} {
		if n, err := strconv.Atoi(os.Getenv(v.env)); err == nil && n > 0 {
			*v.p = n
		}
	}
}
