package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

// DefaultMaxLineBytes bounds one JSONL line when JSONLOptions.MaxLineBytes
// is 0, so that a file without newlines cannot exhaust memory.
const DefaultMaxLineBytes = 64 << 20

// JSONLOptions configure IndexJSONL.
type JSONLOptions struct {
	// SkipBad skips (and counts) bad lines instead of stopping at the
	// first one.
	SkipBad bool
	// Progress, if set, is called after each committed batch.
	Progress func(Progress)
	// OnSkip, if set, is called with each skipped line's error.
	OnSkip func(error)
	// MaxLineBytes bounds one line; 0 means DefaultMaxLineBytes.
	MaxLineBytes int
}

// Progress reports ingestion so far.
type Progress struct {
	Docs    int   // documents committed
	Skipped int   // bad lines skipped
	Lines   int   // lines read
	Bytes   int64 // bytes read
	Elapsed time.Duration
}

// LineError names the JSONL line a document came from.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// IndexJSONL streams JSON objects, one per line, into the collection: BEIR
// corpus lines ({"_id", "title", "text", ...}) or any objects whose id is
// under the schema's id field. Blank lines are ignored. Documents are
// committed in atomic batches of Options.BatchSize; on error, batches
// already committed stay, and the error is a *LineError naming the line
// (and, through *tandem.FieldError, the field).
func (e *Engine) IndexJSONL(ctx context.Context, r io.Reader, opts JSONLOptions) (Progress, error) {
	start := time.Now()
	idField := e.Schema().IDField
	maxLine := opts.MaxLineBytes
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	cr := &countingReader{r: r}
	br := bufio.NewReaderSize(cr, 1<<20)
	var p Progress
	type pending struct {
		doc  tandem.Doc
		line int
	}
	var batch []pending
	skip := func(err error) error {
		if !opts.SkipBad {
			return err
		}
		p.Skipped++
		if opts.OnSkip != nil {
			opts.OnSkip(err)
		}
		return nil
	}
	flush := func() error {
		for len(batch) > 0 {
			docs := make([]tandem.Doc, len(batch))
			for i, pd := range batch {
				docs[i] = pd.doc
			}
			n, _, err := e.putSplitting(ctx, docs)
			p.Docs += n
			var be *storage.BatchError
			if errors.As(err, &be) && be.Index < len(batch) {
				lerr := &LineError{Line: batch[be.Index].line, Err: be.Err}
				if err := skip(lerr); err != nil {
					return err
				}
				// A split batch commits a prefix of n documents before
				// the part holding the bad one; retry the rest without it.
				rest := make([]pending, 0, len(batch)-n)
				rest = append(rest, batch[n:be.Index]...)
				batch = append(rest, batch[be.Index+1:]...)
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		batch = batch[:0]
		p.Bytes = cr.n - int64(br.Buffered())
		p.Elapsed = time.Since(start)
		if opts.Progress != nil {
			opts.Progress(p)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		line, err := readLine(br, maxLine)
		if err == io.EOF && line == nil {
			break
		}
		p.Lines++
		if err != nil && err != io.EOF {
			if errors.Is(err, ErrLineTooLong) {
				if serr := skip(&LineError{Line: p.Lines, Err: fmt.Errorf("%w (limit %d bytes)", err, maxLine)}); serr != nil {
					return p, serr
				}
				continue
			}
			return p, fmt.Errorf("engine: read line %d: %w", p.Lines, err)
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		doc, derr := tandem.DecodeJSON(line, idField)
		if derr != nil {
			if serr := skip(&LineError{Line: p.Lines, Err: derr}); serr != nil {
				return p, serr
			}
			continue
		}
		batch = append(batch, pending{doc: doc, line: p.Lines})
		if len(batch) >= e.opts.BatchSize {
			if err := flush(); err != nil {
				return p, err
			}
		}
	}
	if err := flush(); err != nil {
		return p, err
	}
	return p, nil
}

// ErrLineTooLong reports a JSONL line over the limit.
var ErrLineTooLong = errors.New("engine: line too long")

// readLine returns the next line without its newline; a too-long line is
// consumed and reported as ErrLineTooLong.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong {
			return []byte{}, ErrLineTooLong
		}
		if err == io.EOF && len(line) == 0 {
			return nil, io.EOF
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		if err == io.EOF {
			return line, nil
		}
		return line, err
	}
}

func trimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t' || b[j-1] == '\r' || b[j-1] == '\n') {
		j--
	}
	return b[i:j]
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
