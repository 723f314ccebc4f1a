//go:build race

package main

// raceEnabled says whether the race detector is on, for the soak's report.
const raceEnabled = true
