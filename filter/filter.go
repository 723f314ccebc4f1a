package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/tandemsearch/tandem"
)

// ErrInvalid is wrapped by every parse and check error.
var ErrInvalid = errors.New("filter: invalid filter")

// Error is a parse or check error naming the offending node.
type Error struct {
	Path string // e.g. "and[1].range.year"; "" is the root
	Msg  string
	// Limit names the limit of Limits the filter exceeds (LimitClauses,
	// LimitDepth); "" when the error is not a limit's.
	Limit string
}

func (e *Error) Error() string {
	p := e.Path
	if p == "" {
		p = "(root)"
	}
	return fmt.Sprintf("filter: %s: %s", p, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func errf(path, format string, args ...any) error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Expr is a filter expression: one of *Term, *Terms, *Range, *Prefix,
// *Exists, *And, *Or, *Not.
type Expr interface {
	String() string
	expr()
}

// A Value is a string, a float64 or a bool. Date values are strings until
// Check normalises them.
type Value = any

// Term matches documents whose field equals Value.
type Term struct {
	Field string
	Value Value
}

// Terms matches documents whose field equals any of Values.
type Terms struct {
	Field  string
	Values []Value
}

// Range matches numbers or dates within the bounds; nil bounds are open.
type Range struct {
	Field   string
	GT, GTE Value
	LT, LTE Value
}

// Bounds returns the range's lower and upper bound and whether each is
// inclusive; a bound not given is nil. GT wins over GTE and LT over LTE.
func (r *Range) Bounds() (lo Value, loIncl bool, hi Value, hiIncl bool) {
	lo, loIncl = r.GTE, true
	if r.GT != nil {
		lo, loIncl = r.GT, false
	}
	hi, hiIncl = r.LTE, true
	if r.LT != nil {
		hi, hiIncl = r.LT, false
	}
	return lo, loIncl, hi, hiIncl
}

// Prefix matches keyword values starting with Prefix.
type Prefix struct {
	Field, Prefix string
}

// Exists matches documents that have a value for Field.
type Exists struct{ Field string }

// And matches when every child matches (and an empty And matches all).
type And struct{ Exprs []Expr }

// Or matches when any child matches (and an empty Or matches nothing).
type Or struct{ Exprs []Expr }

// Not matches when its child does not.
type Not struct{ Expr Expr }

func (*Term) expr()   {}
func (*Terms) expr()  {}
func (*Range) expr()  {}
func (*Prefix) expr() {}
func (*Exists) expr() {}
func (*And) expr()    {}
func (*Or) expr()     {}
func (*Not) expr()    {}

func (e *Term) String() string  { return fmt.Sprintf("%s:%v", e.Field, e.Value) }
func (e *Terms) String() string { return fmt.Sprintf("%s:%v", e.Field, e.Values) }
func (e *Range) String() string {
	return fmt.Sprintf("%s:range(gt=%v gte=%v lt=%v lte=%v)", e.Field, e.GT, e.GTE, e.LT, e.LTE)
}
func (e *Prefix) String() string { return fmt.Sprintf("%s:%s*", e.Field, e.Prefix) }
func (e *Exists) String() string { return fmt.Sprintf("exists(%s)", e.Field) }
func (e *And) String() string    { return join("AND", e.Exprs) }
func (e *Or) String() string     { return join("OR", e.Exprs) }
func (e *Not) String() string    { return "NOT " + e.Expr.String() }

func join(op string, es []Expr) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return "(" + strings.Join(parts, " "+op+" ") + ")"
}

// Limits bound the size of a filter, so that a hostile one is refused
// while it is parsed, before any tree is built or any work is done. Zero
// fields mean the defaults (DefaultLimits).
type Limits struct {
	// MaxClauses bounds the clauses of a filter. Every leaf counts one:
	// each term, range, prefix and exists, each value of a terms list,
	// and each empty and or or (which matches everything or nothing).
	MaxClauses int
	// MaxDepth bounds nesting: a filter of one clause is 1 level deep,
	// {"not": clause} 2, and each and, or and not adds a level.
	MaxDepth int
}

// The default Limits: ample for a hand-written or generated filter, far
// below what a filter costs to refuse.
const (
	DefaultMaxClauses = 1024
	DefaultMaxDepth   = 32
)

// DefaultLimits are the limits Parse applies.
var DefaultLimits = Limits{MaxClauses: DefaultMaxClauses, MaxDepth: DefaultMaxDepth}

// Names of the limits, in Error.Limit.
const (
	LimitClauses = "clauses"
	LimitDepth   = "depth"
)

func (l Limits) fill() Limits {
	if l.MaxClauses <= 0 {
		l.MaxClauses = DefaultMaxClauses
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	return l
}

// Parse parses a JSON filter within DefaultLimits. It checks syntax only;
// Check validates field names and types against a schema.
func Parse(data []byte) (Expr, error) { return DefaultLimits.Parse(data) }

// Parse parses a JSON filter, refusing one over l with an *Error whose
// Limit names the limit. It reads data as a stream of JSON tokens and
// stops at the first error, a limit included, so that refusing a filter
// costs in proportion to the part read, at most the limits' worth of
// clauses, however long data is.
func (l Limits) Parse(data []byte) (Expr, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errf("", "empty filter")
	}
	p := &parser{dec: json.NewDecoder(bytes.NewReader(data)), lim: l.fill()}
	p.dec.UseNumber()
	e, err := p.node("", 1)
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); err != io.EOF {
		return nil, errf("", "trailing data after the filter")
	}
	return e, nil
}

// Decode parses the next JSON value of dec as a filter within l, as Parse
// does, reading no further than its first error; a JSON null is no filter
// (nil, nil). It lets a caller decoding a larger document (a search
// request) refuse a filter over the limits without reading the rest, nor
// scanning the filter's own rest to find its end. dec should have
// UseNumber set, so that a number out of float64's range is reported as
// Parse reports it.
func (l Limits) Decode(dec *json.Decoder) (Expr, error) {
	p := &parser{dec: dec, lim: l.fill()}
	t, err := p.token("")
	if err != nil || t == nil {
		return nil, err
	}
	p.peeked = t
	return p.node("", 1)
}

func sub(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parser reads a filter token by token.
type parser struct {
	dec     *json.Decoder
	lim     Limits
	clauses int
	peeked  json.Token // read already, the next token when not nil
}

// token reads the next token; a JSON syntax error is reported at path.
func (p *parser) token(path string) (json.Token, error) {
	if t := p.peeked; t != nil {
		p.peeked = nil
		return t, nil
	}
	t, err := p.dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, errf(path, "malformed JSON: %v", err)
	}
	return t, nil
}

// clause counts one clause, at path.
func (p *parser) clause(path string) error {
	p.clauses++
	if p.clauses > p.lim.MaxClauses {
		return &Error{Path: path, Msg: fmt.Sprintf("over the limit of %d clauses", p.lim.MaxClauses), Limit: LimitClauses}
	}
	return nil
}

// open reads the token that opens an object or a list (delim), or says
// what came instead.
func (p *parser) open(path string, delim json.Delim, want string) error {
	t, err := p.token(path)
	if err != nil {
		return err
	}
	if t != delim {
		return errf(path, "want %s, got %s", want, kind(t))
	}
	return nil
}

// key reads the next key of an object, "" with ok false at its end.
func (p *parser) key(path string) (string, bool, error) {
	t, err := p.token(path)
	if err != nil {
		return "", false, err
	}
	if t == json.Delim('}') {
		return "", false, nil
	}
	k, ok := t.(string)
	if !ok {
		// Inside an object the decoder gives only keys; a caller that
		// asks for a key after a value that opened an array or an
		// object is answered here, not with a panic.
		return "", false, errf(path, "want a key or the end of the object")
	}
	return k, true, nil
}

// node parses the filter node at path, depth levels deep.
func (p *parser) node(path string, depth int) (Expr, error) {
	if depth > p.lim.MaxDepth {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("nested deeper than the limit of %d levels", p.lim.MaxDepth), Limit: LimitDepth}
	}
	if err := p.open(path, '{', "an object"); err != nil {
		return nil, err
	}
	op, ok, err := p.key(path)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errf(path, "want exactly one operator, got none")
	}
	e, err := p.operator(op, path, depth)
	if err != nil {
		return nil, err
	}
	if next, ok, err := p.key(path); err != nil {
		return nil, err
	} else if ok {
		return nil, errf(path, "want exactly one operator, got %q and %q", op, next)
	}
	return e, nil
}

// operator parses the argument of operator op of the node at path.
func (p *parser) operator(op, path string, depth int) (Expr, error) {
	ps := sub(path, op)
	switch op {
	case "and", "or":
		t, err := p.token(ps)
		if err != nil {
			return nil, err
		}
		if t != json.Delim('[') {
			return nil, errf(ps, "want a list of filters, got %s", kind(t))
		}
		var children []Expr
		for p.dec.More() {
			c, err := p.node(fmt.Sprintf("%s[%d]", ps, len(children)), depth+1)
			if err != nil {
				return nil, err
			}
			children = append(children, c)
		}
		if _, err := p.token(ps); err != nil { // ']'
			return nil, err
		}
		if len(children) == 0 {
			if err := p.clause(ps); err != nil {
				return nil, err
			}
		}
		if op == "and" {
			return &And{Exprs: children}, nil
		}
		return &Or{Exprs: children}, nil
	case "not":
		e, err := p.node(ps, depth+1)
		if err != nil {
			return nil, err
		}
		return &Not{Expr: e}, nil
	case "exists":
		if err := p.clause(ps); err != nil {
			return nil, err
		}
		t, err := p.token(ps)
		if err != nil {
			return nil, err
		}
		if f, ok := t.(string); ok {
			if f == "" {
				return nil, errf(ps, "empty field name")
			}
			return &Exists{Field: f}, nil
		}
		if t == json.Delim('{') { // {"exists": {"field": "name"}}
			k, ok, err := p.key(ps)
			if err != nil {
				return nil, err
			}
			if ok && k == "field" {
				t, err := p.token(ps)
				if err != nil {
					return nil, err
				}
				if _, ok := t.(string); !ok {
					return nil, errf(ps, `want a field name or {"field": name}`)
				}
				_, more, err := p.key(ps)
				if err != nil {
					return nil, err
				}
				if f, ok := t.(string); ok && f != "" && !more {
					return &Exists{Field: f}, nil
				}
			}
		}
		return nil, errf(ps, `want a field name or {"field": name}`)
	case "term", "terms", "range", "prefix":
		if op != "terms" {
			if err := p.clause(ps); err != nil {
				return nil, err
			}
		}
		if err := p.open(ps, '{', `{"field": value} with one field`); err != nil {
			return nil, err
		}
		field, ok, err := p.key(ps)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errf(ps, `want {"field": value} with one field, got an empty object`)
		}
		if field == "" {
			return nil, errf(ps, "empty field name")
		}
		fp := sub(ps, field)
		e, err := p.leaf(op, field, fp)
		if err != nil {
			return nil, err
		}
		if next, ok, err := p.key(ps); err != nil {
			return nil, err
		} else if ok {
			return nil, errf(ps, `want {"field": value} with one field, got %q and %q`, field, next)
		}
		return e, nil
	}
	return nil, errf(ps, "unknown operator (want term, terms, range, prefix, exists, and, or, not)")
}

// leaf parses the value of a term, terms, range or prefix on field.
func (p *parser) leaf(op, field, fp string) (Expr, error) {
	switch op {
	case "term":
		v, err := p.scalar(fp)
		if err != nil {
			return nil, err
		}
		return &Term{Field: field, Value: v}, nil
	case "terms":
		t, err := p.token(fp)
		if err != nil {
			return nil, err
		}
		if t != json.Delim('[') {
			return nil, errf(fp, "want a list of values, got %s", kind(t))
		}
		var vals []Value
		for p.dec.More() {
			vp := fmt.Sprintf("%s[%d]", fp, len(vals))
			if err := p.clause(vp); err != nil {
				return nil, err
			}
			v, err := p.scalar(vp)
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
		}
		if _, err := p.token(fp); err != nil { // ']'
			return nil, err
		}
		if len(vals) == 0 {
			return nil, errf(fp, "empty list of values")
		}
		return &Terms{Field: field, Values: vals}, nil
	case "prefix":
		t, err := p.token(fp)
		if err != nil {
			return nil, err
		}
		s, ok := t.(string)
		if !ok {
			return nil, errf(fp, "want a string prefix, got %s", kind(t))
		}
		return &Prefix{Field: field, Prefix: s}, nil
	}
	// range
	if err := p.open(fp, '{', `bounds such as {"gte": 1, "lt": 5}`); err != nil {
		return nil, err
	}
	r := &Range{Field: field}
	n := 0
	for {
		k, ok, err := p.key(fp)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		n++
		bp := sub(fp, k)
		var dst *Value
		switch k {
		case "gt":
			dst = &r.GT
		case "gte":
			dst = &r.GTE
		case "lt":
			dst = &r.LT
		case "lte":
			dst = &r.LTE
		default:
			return nil, errf(bp, "unknown bound (want gt, gte, lt or lte)")
		}
		if *dst != nil {
			return nil, errf(bp, "bound given twice")
		}
		v, err := p.scalar(bp)
		if err != nil {
			return nil, err
		}
		if _, isBool := v.(bool); isBool {
			return nil, errf(bp, "a range bound must be a number or a date")
		}
		*dst = v
	}
	if n == 0 {
		return nil, errf(fp, `want bounds such as {"gte": 1, "lt": 5}, got an empty object`)
	}
	if r.GT != nil && r.GTE != nil {
		return nil, errf(fp, "both gt and gte")
	}
	if r.LT != nil && r.LTE != nil {
		return nil, errf(fp, "both lt and lte")
	}
	return r, nil
}

// scalar reads a string, number or bool.
func (p *parser) scalar(path string) (Value, error) {
	t, err := p.token(path)
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case string, bool, float64: // float64 from a decoder without UseNumber
		return x, nil
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return nil, errf(path, "number %s out of range", x)
		}
		return f, nil
	}
	return nil, errf(path, "want a string, number or bool, got %s", kind(t))
}

// kind names a JSON token's kind for errors.
func kind(v any) string {
	switch v {
	case json.Delim('{'):
		return "an object"
	case json.Delim('['):
		return "a list"
	}
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case json.Number, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// Check validates e against schema: every field must exist, and every value
// must suit the field's type. Date values are normalised in place to
// tandem.FormatDate form, so Check must run before Match or compilation.
func Check(e Expr, schema *tandem.Schema) error {
	return check(e, schema, "")
}

func check(e Expr, s *tandem.Schema, path string) error {
	field := func(op, name string) (tandem.Field, string, error) {
		p := sub(sub(path, op), name)
		f, ok := s.Field(name)
		if !ok {
			return f, p, errf(p, "unknown field %q", name)
		}
		if f.Type == tandem.Text && op != "exists" {
			return f, p, errf(p, "%q is a text field; filters apply to keyword, keywords, number, date and bool fields", name)
		}
		return f, p, nil
	}
	switch x := e.(type) {
	case *Term:
		f, p, err := field("term", x.Field)
		if err != nil {
			return err
		}
		x.Value, err = coerce(f, x.Value, p)
		return err
	case *Terms:
		f, p, err := field("terms", x.Field)
		if err != nil {
			return err
		}
		for i := range x.Values {
			if x.Values[i], err = coerce(f, x.Values[i], fmt.Sprintf("%s[%d]", p, i)); err != nil {
				return err
			}
		}
	case *Range:
		f, p, err := field("range", x.Field)
		if err != nil {
			return err
		}
		if f.Type != tandem.Number && f.Type != tandem.Date {
			return errf(p, "range needs a number or date field; %q is %s", x.Field, f.Type)
		}
		for _, b := range []struct {
			name string
			v    *Value
		}{{"gt", &x.GT}, {"gte", &x.GTE}, {"lt", &x.LT}, {"lte", &x.LTE}} {
			if *b.v == nil {
				continue
			}
			if *b.v, err = coerce(f, *b.v, sub(p, b.name)); err != nil {
				return err
			}
		}
	case *Prefix:
		f, p, err := field("prefix", x.Field)
		if err != nil {
			return err
		}
		if f.Type != tandem.Keyword && f.Type != tandem.Keywords {
			return errf(p, "prefix needs a keyword field; %q is %s", x.Field, f.Type)
		}
	case *Exists:
		if _, _, err := field("exists", x.Field); err != nil {
			return err
		}
	case *And:
		for i, c := range x.Exprs {
			if err := check(c, s, fmt.Sprintf("%s[%d]", sub(path, "and"), i)); err != nil {
				return err
			}
		}
	case *Or:
		for i, c := range x.Exprs {
			if err := check(c, s, fmt.Sprintf("%s[%d]", sub(path, "or"), i)); err != nil {
				return err
			}
		}
	case *Not:
		return check(x.Expr, s, sub(path, "not"))
	default:
		return errf(path, "unknown expression %T", e)
	}
	return nil
}

func coerce(f tandem.Field, v Value, path string) (Value, error) {
	switch f.Type {
	case tandem.Keyword, tandem.Keywords:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case tandem.Number:
		if n, ok := v.(float64); ok {
			return n, nil
		}
	case tandem.Bool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case tandem.Date:
		if s, ok := v.(string); ok {
			t, err := tandem.ParseDate(s)
			if err != nil {
				return nil, errf(path, "%v", err)
			}
			return tandem.FormatDate(t), nil
		}
	}
	return nil, errf(path, "%q is a %s field; got %s", f.Name, f.Type, kind(v))
}

// Match reports whether a document's normalised fields satisfy e, which
// must have passed Check. It is the reference semantics of the language.
func Match(e Expr, s *tandem.Schema, fields map[string]any) bool {
	switch x := e.(type) {
	case *Term:
		return anyValue(fields[x.Field], func(v any) bool { return equal(v, x.Value) })
	case *Terms:
		return anyValue(fields[x.Field], func(v any) bool {
			for _, w := range x.Values {
				if equal(v, w) {
					return true
				}
			}
			return false
		})
	case *Range:
		f, _ := s.Field(x.Field)
		return anyValue(fields[x.Field], func(v any) bool { return inRange(f.Type, v, x) })
	case *Prefix:
		return anyValue(fields[x.Field], func(v any) bool {
			str, ok := v.(string)
			return ok && strings.HasPrefix(str, x.Prefix)
		})
	case *Exists:
		v, ok := fields[x.Field]
		if !ok || v == nil {
			return false
		}
		if l, ok := v.([]any); ok {
			return len(l) > 0
		}
		if l, ok := v.([]string); ok {
			return len(l) > 0
		}
		return true
	case *And:
		for _, c := range x.Exprs {
			if !Match(c, s, fields) {
				return false
			}
		}
		return true
	case *Or:
		for _, c := range x.Exprs {
			if Match(c, s, fields) {
				return true
			}
		}
		return false
	case *Not:
		return !Match(x.Expr, s, fields)
	}
	return false
}

// anyValue applies pred to a scalar, or to each element of a list.
func anyValue(v any, pred func(any) bool) bool {
	switch l := v.(type) {
	case nil:
		return false
	case []any:
		for _, e := range l {
			if pred(e) {
				return true
			}
		}
		return false
	case []string:
		for _, e := range l {
			if pred(e) {
				return true
			}
		}
		return false
	}
	return pred(v)
}

func equal(a, b any) bool {
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			return sa == sb
		}
	}
	return a == b
}

func inRange(t tandem.FieldType, v any, r *Range) bool {
	cmp := func(a, b any) (int, bool) {
		switch t {
		case tandem.Number:
			x, ok1 := a.(float64)
			y, ok2 := b.(float64)
			if !ok1 || !ok2 {
				return 0, false
			}
			switch {
			case x < y:
				return -1, true
			case x > y:
				return 1, true
			}
			return 0, true
		case tandem.Date:
			x, ok1 := a.(string)
			y, ok2 := b.(string)
			if !ok1 || !ok2 {
				return 0, false
			}
			tx, err1 := tandem.ParseDate(x)
			ty, err2 := tandem.ParseDate(y)
			if err1 != nil || err2 != nil {
				return 0, false
			}
			return tx.Compare(ty), true
		}
		return 0, false
	}
	for _, b := range []struct {
		bound Value
		ok    func(int) bool
	}{
		{r.GT, func(c int) bool { return c > 0 }},
		{r.GTE, func(c int) bool { return c >= 0 }},
		{r.LT, func(c int) bool { return c < 0 }},
		{r.LTE, func(c int) bool { return c <= 0 }},
	} {
		if b.bound == nil {
			continue
		}
		c, ok := cmp(v, b.bound)
		if !ok || !b.ok(c) {
			return false
		}
	}
	return true
}

// Fields returns the field names e refers to, sorted and deduplicated.
func Fields(e Expr) []string {
	set := map[string]bool{}
	var walk func(Expr)
	walk = func(e Expr) {
		switch x := e.(type) {
		case *Term:
			set[x.Field] = true
		case *Terms:
			set[x.Field] = true
		case *Range:
			set[x.Field] = true
		case *Prefix:
			set[x.Field] = true
		case *Exists:
			set[x.Field] = true
		case *And:
			for _, c := range x.Exprs {
				walk(c)
			}
		case *Or:
			for _, c := range x.Exprs {
				walk(c)
			}
		case *Not:
			walk(x.Expr)
		}
	}
	walk(e)
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
