// Package bench holds what the benchmarks of the tandem command share;
// each benchmark is a package below it:
//
//   - ingest: tandem bench ingest (make bench-ingest), ingest and search
//     at scale on synthetic documents that bring their vectors;
//   - late: tandem bench late (make bench-late), late interaction on
//     synthetic token matrices;
//   - load: tandem bench serve (make bench-serve), a running server under
//     load over HTTP;
//   - cluster: tandem bench cluster (make bench-cluster), a 3-node cluster
//     against one engine;
//   - encode: tandem bench encode (make bench-encode), document encoding.
//
// Each has a Config, Run(ctx, Config) (*Report, error) and a Report that
// writes itself as the command prints it; cmd/tandem keeps the flags.
//
// What they share: Generate makes documents ahead of an ingest, in order;
// Measure, Percentile and Ms summarise latencies, and Searches.Row prints
// a search configuration's row; Size formats bytes; MemoryStatus describes
// the process's memory (from internal/procstat) for progress lines, and
// NextPhase starts a phase whose peak RSS is its own; Output is the
// progress and profile settings of a Config, and StartCPUProfile and
// WriteHeapProfile write the profiles; CheckNew refuses a collection
// directory that exists.
//
// Invariants of every benchmark here: its figures are measured, never
// asserted, so a Run fails only when the benchmark cannot run (a bad
// Config, a missing file, an engine or a server error), never because a
// figure is poor; what it builds is removed afterwards unless the Config
// keeps it (Keep, or cluster's Dir); configurations that it compares
// alternate query by query (or batch by batch), so that the machine's
// other load falls on all alike. The tests of these packages are short runs that check every row
// is reported with a figure, not the figures.
package bench
