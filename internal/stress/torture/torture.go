package torture

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
)

// Defaults of Config's zero fields.
const (
	DefaultKills         = 100 // when Duration is zero too
	DefaultIDs           = 2000
	DefaultMaxBatch      = 300
	DefaultModelMaxBatch = 32 // with Model
	DefaultCloseEvery    = 15
	DefaultProgressEvery = 10 * time.Second
	DefaultTargetWait    = 5 * time.Second
)

// Config configures a run. Zero fields take the defaults above; Dir and
// WriterCommand are required.
type Config struct {
	// Dir is the working directory: collection/, ledger and check/. A run
	// in a directory that holds a ledger resumes it.
	Dir string
	// Kills is the number of SIGKILLs and Duration the time limit: the run
	// stops at whichever comes first; zero is no limit, unless both are.
	Kills    int
	Duration time.Duration
	// Seed seeds the operations and the kill times (0: from the clock); the
	// Report carries it, to replay a run's choices.
	Seed uint64
	// IDs is the size of the pool of document ids, which bounds the
	// collection.
	IDs int
	// MaxBatch is the largest batch of one call.
	MaxBatch int
	// CloseEvery: the writer closes and reopens the engine once in this
	// many operations, on average.
	CloseEvery int
	// LateIndex is the late-interaction index of the collection's model
	// (engine.Options.LateIndex).
	LateIndex string
	// Model indexes with this installed model on short texts instead of
	// supplied vectors (slower).
	Model string
	// Progress, if not nil, receives a line at the start, one every
	// ProgressEvery, and one at the end.
	Progress      io.Writer
	ProgressEvery time.Duration
	// TargetWait bounds the wait for the phase a kill aims at, counted
	// from the writer's start until it has opened, then again from its
	// open (so that a slow open does not use it up); the kill happens
	// anyway when it runs out.
	TargetWait time.Duration
	// WriterCommand returns the command of a writer process with the given
	// arguments: a process that parses them with WriterFlags and calls
	// RunWriter, whose stdout the harness reads.
	WriterCommand func(args []string) (*exec.Cmd, error)
}

// withDefaults fills c's zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Kills == 0 && c.Duration == 0 {
		c.Kills = DefaultKills
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
		if c.Model != "" {
			c.MaxBatch = DefaultModelMaxBatch
		}
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	c.IDs = cmp.Or(c.IDs, DefaultIDs)
	c.CloseEvery = cmp.Or(c.CloseEvery, DefaultCloseEvery)
	c.ProgressEvery = cmp.Or(c.ProgressEvery, DefaultProgressEvery)
	c.TargetWait = cmp.Or(c.TargetWait, DefaultTargetWait)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	var bad []string
	for name, v := range map[string]int64{"Kills": int64(c.Kills), "Duration": int64(c.Duration), "IDs": int64(c.IDs),
		"MaxBatch": int64(c.MaxBatch), "CloseEvery": int64(c.CloseEvery), "TargetWait": int64(c.TargetWait)} {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("Config.%s is negative", name))
		}
	}
	if c.Dir == "" {
		bad = append(bad, "Config.Dir is required")
	}
	if c.WriterCommand == nil {
		bad = append(bad, "Config.WriterCommand is required")
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return c, fmt.Errorf("torture: %s", strings.Join(bad, "; "))
	}
	return c, nil
}

// Report is what a run found.
type Report struct {
	// Config is the run's, its zero fields filled.
	Config   Config
	Seed     uint64
	Kills    int
	Elapsed  time.Duration
	Calls    map[string]int // acknowledged calls by method
	Added    int            // documents written for the first time (or after a delete)
	Updated  int
	Deleted  int
	NoDelete int // deletes of ids that were not live
	Lost     int
	Disagree int
	// Failures are the first lost operations and disagreements, and any
	// failure that stopped the run.
	Failures  []string
	Stopped   error
	OpenTimes []time.Duration
	// Phases counts kills by the phase they landed in (classified), Raw
	// by the writer's last reported phase.
	Phases, Raw map[string]int
	InFlight    int // kills with an operation in flight
	Committed   int // of which committed at least one batch
	Live        int // live documents at the last check
	LateDesc    string
	// Truncated counts the checks that found the change log truncated
	// (its floor above 0), and LogFloor is the floor at the last check.
	Truncated int
	LogFloor  uint64
}

func (s *Report) acknowledged() int {
	n := 0
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// openTime is the q-quantile of the times the collection took to open
// after a kill (q = 1: the longest); 0 before the first kill.
func (s *Report) openTime(q float64) time.Duration {
	return bench.Percentile(s.OpenTimes, q)
}

// Failed reports whether the run found any loss or disagreement, or
// stopped on an error.
func (s *Report) Failed() bool { return s.Lost > 0 || s.Disagree > 0 || s.Stopped != nil }

// Run runs the kills until c's limit or until ctx is done. It returns an
// error for a bad Config, a failure of the harness itself or ctx's end,
// with the report so far; what the kills found is in the report, which
// Failed sums up.
func Run(ctx context.Context, c Config) (*Report, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	progress := c.Progress
	coll, checkDir := filepath.Join(c.Dir, "collection"), filepath.Join(c.Dir, "check")
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	l := newLedger(filepath.Join(c.Dir, "ledger"))
	if err := l.read(); err != nil { // a run resumed in the same directory
		return nil, err
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x6b696c6c))
	ck := &checker{model: c.Model, lateIndex: c.LateIndex, rand: rand.New(rand.NewPCG(c.Seed, 0x636b))}
	s := &Report{Config: c, Seed: c.Seed, Phases: map[string]int{}, Raw: map[string]int{}}
	est := newPhaseTimes()
	fmt.Fprintf(progress, "torture: seed %d, directory %s, %s\n", c.Seed, c.Dir, c.limits())
	start := time.Now()
	lastProgress := start
	for n := 0; ; n++ {
		s.Elapsed = time.Since(start)
		if c.Kills > 0 && n >= c.Kills || c.Duration > 0 && s.Elapsed >= c.Duration {
			break
		}
		if err := ctx.Err(); err != nil {
			return s, err
		}
		wc := WriterConfig{dir: coll, ledger: l.path, seed: c.Seed ^ uint64(n+1)*0x9e3779b97f4a7c15, firstOp: l.nextOp,
			ids: c.IDs, maxBatch: c.MaxBatch, closeEvery: c.CloseEvery, lateIndex: c.LateIndex, model: c.Model}
		target := pickTarget(r)
		last, err := killWriter(c.WriterCommand, wc, target, r, est, c.TargetWait)
		if err != nil {
			s.Stopped = err
			break
		}
		if err := l.read(); err != nil {
			s.Stopped = err
			break
		}
		os.RemoveAll(checkDir)
		if err := copyTree(coll, checkDir); err != nil {
			return s, fmt.Errorf("copy the killed collection: %w", err)
		}
		res, err := ck.check(ctx, checkDir, l)
		s.Kills++
		if err != nil {
			s.Stopped = fmt.Errorf("kill %d (in %s): %w", n+1, last, err)
			s.Failures = append(s.Failures, s.Stopped.Error())
			break
		}
		os.RemoveAll(checkDir)
		s.record(n+1, last, res, l)
		if time.Since(lastProgress) >= c.ProgressEvery {
			lastProgress = time.Now()
			s.Elapsed = time.Since(start)
			fmt.Fprintln(progress, s.progressLine(c))
		}
	}
	s.Elapsed = time.Since(start)
	fmt.Fprintln(progress, s.progressLine(c))
	return s, nil
}

func (c Config) limits() string {
	var parts []string
	if c.Kills > 0 {
		parts = append(parts, fmt.Sprintf("%d kills", c.Kills))
	}
	if c.Duration > 0 {
		parts = append(parts, fmt.Sprintf("at most %v", c.Duration))
	}
	late := engine.DefaultLateIndex(c.LateIndex, tortureDim) // an installed model's tokens are a multiple of 8 wide too
	model := "external vectors"
	if c.Model != "" {
		model = "model " + c.Model
	}
	return fmt.Sprintf("%s; %s, late index %s, %d ids, batches of 1-%d", strings.Join(parts, " or "), model, late, c.IDs, c.MaxBatch)
}

// record adds one kill's check to the summary.
func (s *Report) record(n int, last string, res checkResult, l *ledger) {
	if last == "" {
		last = "start" // killed before the writer's first line
	}
	phase := classify(last, res)
	s.Phases[phase]++
	s.Raw[last]++
	s.OpenTimes = append(s.OpenTimes, res.open)
	if res.inFlight {
		s.InFlight++
		if res.committed {
			s.Committed++
		}
	}
	s.Lost += len(res.lost)
	s.Disagree += len(res.problems)
	for _, f := range append(res.lost, res.problems...) {
		if len(s.Failures) < 20 {
			s.Failures = append(s.Failures, fmt.Sprintf("kill %d (in %s): %s", n, phase, f))
		}
	}
	s.Calls = maps.Clone(l.calls)
	s.Added, s.Updated, s.Deleted, s.NoDelete = l.added, l.updated, l.deleted, l.noDelete
	s.Live, s.LateDesc = res.live, res.lateDesc
	if res.logFloor > 0 {
		s.Truncated++
	}
	s.LogFloor = res.logFloor
}

// classify names the phase a kill landed in from the writer's last
// reported phase and what the check found:
//
//	commit    in a write call, none of its batches durable yet: checking,
//	          blob encoding (model encoding with --model) and the Badger
//	          commit, whose fsync dominates with supplied vectors
//	apply     in a write call, at least one batch durable (the store's last
//	          sequence moved past the one before the call): the derived
//	          indexes applying it, or later batches of the call
//	snapshot  in Close, before every model snapshot was at the last sequence
//	close     in Close, after the snapshots (Bleve flush, Badger close)
//
// and otherwise the writer's own phase: start, open:recover, open:clean,
// encode, ledger.
func classify(last string, res checkResult) string {
	switch last {
	case "ingest", "apply", "delete":
		if res.committed {
			return "apply"
		}
		return "commit"
	case "close":
		if res.snapshotsCurrent {
			return "close"
		}
		return "snapshot"
	}
	return last
}

// Kill targets: the writer phase a kill waits for, with weights. "random"
// kills at a uniformly random time instead.
var tortureTargets = []struct {
	phase  string
	weight int
}{
	{"open:recover", 10}, {"encode", 5}, {"ingest", 20}, {"apply", 15}, {"delete", 10},
	{"ledger", 5}, {"close", 20}, {"open:clean", 5}, {"random", 10},
}

func pickTarget(r *rand.Rand) string {
	total := 0
	for _, t := range tortureTargets {
		total += t.weight
	}
	x := r.IntN(total)
	for _, t := range tortureTargets {
		if x < t.weight {
			return t.phase
		}
		x -= t.weight
	}
	return "random"
}

// phaseTimes estimates how long each writer phase lasts, from the times
// between its phase lines, so that a kill aimed at a phase waits a random
// part of it.
type phaseTimes struct {
	mean map[string]time.Duration
}

func newPhaseTimes() *phaseTimes {
	return &phaseTimes{mean: map[string]time.Duration{"open:recover": 200 * time.Millisecond, "open:clean": 100 * time.Millisecond,
		"close": 50 * time.Millisecond}}
}

func (p *phaseTimes) observe(phase string, d time.Duration) {
	if m, ok := p.mean[phase]; ok {
		p.mean[phase] = (7*m + d) / 8
	} else {
		p.mean[phase] = d
	}
}

// delay is a random wait within a typical run of the phase.
func (p *phaseTimes) delay(r *rand.Rand, phase string) time.Duration {
	m := p.mean[phase]
	if m <= 0 {
		m = 2 * time.Millisecond
	}
	return time.Duration(r.Int64N(int64(m) + 1))
}

type phaseLine struct {
	name string
	at   time.Time
}

// killWriter starts a writer with command, SIGKILLs it once it has entered the target
// phase plus a random part of that phase's typical length (or after
// targetWait), and returns the last phase it reported. A writer that
// exits by itself has failed: its error is returned.
func killWriter(command func([]string) (*exec.Cmd, error), wc WriterConfig, target string, r *rand.Rand, est *phaseTimes, targetWait time.Duration) (string, error) {
	cmd, err := command(wc.args())
	if err != nil {
		return "", err
	}
	var errOut bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &errOut, n: 8 << 10}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start writer: %w", err)
	}
	lines := make(chan phaseLine, 1<<16)
	var errLine string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "phase "); ok {
				lines <- phaseLine{name, time.Now()}
			} else if msg, ok := strings.CutPrefix(sc.Text(), "error "); ok {
				errLine = msg
			}
		}
	}()
	var last phaseLine
	seen := func(l phaseLine) {
		if last.name != "" {
			est.observe(last.name, l.at.Sub(last.at))
		}
		last = l
	}
	exited := false
	if target == "random" {
		time.Sleep(time.Duration(r.Int64N(int64(time.Second))))
	} else {
		// Once the writer has opened, let it run a while before aiming,
		// so that each writer acknowledges some operations first.
		var warmUp time.Duration
		if target != "open:recover" {
			warmUp = time.Duration(r.Int64N(int64(400 * time.Millisecond)))
		}
		var aimFrom time.Time // zero until the writer has opened
		deadline := time.After(targetWait + warmUp)
	wait:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					exited = true
					break wait
				}
				seen(l)
				if aimFrom.IsZero() && l.name != "start" && l.name != "open:recover" {
					aimFrom = l.at.Add(warmUp)
					deadline = time.After(targetWait + warmUp)
				}
				if l.name == target && (target == "open:recover" || !aimFrom.IsZero() && !l.at.Before(aimFrom)) {
					time.Sleep(est.delay(r, target))
					break wait
				}
			case <-deadline:
				break wait
			}
		}
	}
	if !exited {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	for l := range lines {
		seen(l)
	}
	wg.Wait()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return last.name, nil
		}
	}
	msg := errLine
	if msg == "" {
		msg = strings.TrimSpace(errOut.String())
	}
	return last.name, fmt.Errorf("writer exited by itself (%v) in phase %s: %s", err, last.name, msg)
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func (s *Report) progressLine(c Config) string {
	rate := float64(s.Kills) / s.Elapsed.Seconds()
	line := fmt.Sprintf("torture: %d kills", s.Kills)
	var eta time.Duration
	if c.Kills > 0 {
		line = fmt.Sprintf("torture: %d/%d kills (%.0f%%)", s.Kills, c.Kills, 100*float64(s.Kills)/float64(c.Kills))
		if rate > 0 {
			eta = time.Duration(float64(c.Kills-s.Kills) / rate * float64(time.Second))
		}
	}
	if c.Duration > 0 && (eta == 0 || c.Duration-s.Elapsed < eta) {
		eta = max(0, c.Duration-s.Elapsed)
	}
	return fmt.Sprintf("%s, %.2f kills/s, ETA %v; %d operations acknowledged, %d lost, %d disagreements; open p50 %v",
		line, rate, eta.Round(time.Second), s.acknowledged(), s.Lost, s.Disagree, s.openTime(0.5).Round(time.Millisecond))
}

// Print writes the final summary.
func (s *Report) Print(w io.Writer) {
	c := s.Config
	fmt.Fprintf(w, "tandem torture: seed %d, %s\n", s.Seed, c.limits())
	fmt.Fprintf(w, "kills:              %d in %v (%.2f kills/s)\n", s.Kills, s.Elapsed.Round(time.Second), float64(s.Kills)/s.Elapsed.Seconds())
	fmt.Fprintf(w, "acknowledged:       %d operations (index %d, jsonl %d, stream %d, delete %d)\n", s.acknowledged(),
		s.Calls["index"], s.Calls["jsonl"], s.Calls["stream"], s.Calls["delete"])
	fmt.Fprintf(w, "documents:          %d added, %d updated, %d deleted, %d deletes of absent ids; %d live at the end\n",
		s.Added, s.Updated, s.Deleted, s.NoDelete, s.Live)
	fmt.Fprintf(w, "in flight at kill:  %d operations, %d of which had committed a batch\n", s.InFlight, s.Committed)
	fmt.Fprintf(w, "lost:               %d\n", s.Lost)
	fmt.Fprintf(w, "disagreements:      %d\n", s.Disagree)
	fmt.Fprintf(w, "open after kill:    p50 %v, p90 %v, max %v\n", s.openTime(0.5).Round(time.Millisecond),
		s.openTime(0.9).Round(time.Millisecond), s.openTime(1).Round(time.Millisecond))
	fmt.Fprintf(w, "late index:         %s\n", s.LateDesc)
	fmt.Fprintf(w, "change log:         truncated at %d of %d checks; floor %d at the last\n", s.Truncated, s.Kills, s.LogFloor)
	fmt.Fprintf(w, "kills by phase:     %s\n", distribution(s.Phases, s.Kills))
	fmt.Fprintf(w, "writer's last line: %s\n", distribution(s.Raw, s.Kills))
	for _, f := range s.Failures {
		fmt.Fprintf(w, "FAIL %s\n", f)
	}
	if s.Stopped != nil {
		fmt.Fprintf(w, "STOPPED %v\n", s.Stopped)
	}
}

func distribution(m map[string]int, total int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || m[names[i]] == m[names[j]] && names[i] < names[j]
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d (%.1f%%)", n, m[n], 100*float64(m[n])/float64(max(total, 1))))
	}
	return strings.Join(parts, ", ")
}
