// Package manual allocates memory outside the Go heap, to be freed by
// hand, for data that lives long, holds no Go pointers, and would
// otherwise count twice against the process's memory: once as itself and
// once as the headroom the Go collector leaves above the live heap before
// it collects (GOGC=100 lets the heap reach twice what was live). Pebble
// keeps its block cache outside the Go heap for the same reason.
//
// Invariants: the memory New returns is zeroed, holds no Go pointers, is
// never moved, and is valid until Free; Free of memory New did not return,
// or a second Free, is undefined. Without cgo, New allocates from the Go
// heap and Free does nothing.
package manual
