package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tandemsearch/tandem"
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

// Progress reports ingestion so far. Every count is of committed
// (acknowledged) work, except Lines and Bytes, which are the input read up
// to the last committed batch.
type Progress struct {
	Docs    int   // documents committed
	Skipped int   // bad lines skipped
	Lines   int   // lines read
	Bytes   int64 // bytes read
	// Tokens is the number of tokens the encoders read for the committed
	// documents (0 when every document brought its vectors).
	Tokens  int64
	Batches int // atomic batches committed
	Elapsed time.Duration
}

// IndexJSONL streams JSON objects, one per line, into the collection: BEIR
// corpus lines ({"_id", "title", "text", ...}) or any objects whose id is
// under the schema's id field. A line may bring precomputed vectors under
// tandem.VectorsKey ("_vectors"). Blank lines are ignored. Documents go
// through the write pipeline (see Index) in atomic batches of
// Options.BatchSize; on error, batches already committed stay, and the
// error is a *DocError naming the line (and, through *tandem.FieldError
// or *tandem.VectorError, the field or the model); nothing of the bad
// line's batch is stored. IndexJSONL returns when every committed batch is
// applied to every index, after the reader's Read in progress returns.
func (e *Engine) IndexJSONL(ctx context.Context, r io.Reader, opts JSONLOptions) (Progress, error) {
	maxLine := opts.MaxLineBytes
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	cr := &countingReader{r: r}
	src := &jsonlSource{cr: cr, br: bufio.NewReaderSize(cr, 1<<20), max: maxLine, idField: e.Schema().IDField}
	po := pipelineOptions{skipBad: opts.SkipBad, progress: opts.Progress}
	if opts.OnSkip != nil {
		po.onSkip = func(de *docError) { opts.OnSkip(de.public(true)) }
	}
	p, err := e.ingest(ctx, src, po)
	err = docFailure(err, true)
	if err == nil {
		// Lines after the last committed batch (blank ones, skipped ones)
		// were read too.
		p.Lines, p.Bytes = src.consumed()
	}
	return p, err
}

// jsonlSource reads documents from JSONL, one per non-blank line.
type jsonlSource struct {
	cr      *countingReader
	br      *bufio.Reader
	max     int
	idField string
	line    int
}

func (s *jsonlSource) next() (tandem.Doc, int, error) {
	for {
		line, err := readLine(s.br, s.max)
		if err == io.EOF && line == nil {
			return tandem.Doc{}, 0, io.EOF
		}
		s.line++
		if err != nil && err != io.EOF {
			if errors.Is(err, ErrLineTooLong) {
				return tandem.Doc{}, s.line, &docError{pos: s.line, err: fmt.Errorf("%w (limit %d bytes)", err, s.max)}
			}
			return tandem.Doc{}, s.line, fmt.Errorf("engine: read line %d: %w", s.line, err)
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		doc, err := tandem.DecodeJSON(line, s.idField)
		if err != nil {
			return tandem.Doc{}, s.line, &docError{pos: s.line, err: err}
		}
		return doc, s.line, nil
	}
}

func (s *jsonlSource) consumed() (int, int64) { return s.line, s.cr.n - int64(s.br.Buffered()) }

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
