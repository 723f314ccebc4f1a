//go:build !race

package soak

// raceEnabled says whether the race detector is on, for the soak's report.
const raceEnabled = false
