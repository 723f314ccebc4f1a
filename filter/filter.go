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

// maxDepth bounds nesting so that a hostile filter cannot exhaust the stack.
const maxDepth = 64

// Parse parses a JSON filter. It checks syntax only; Check validates field
// names and types against a schema.
func Parse(data []byte) (Expr, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errf("", "empty filter")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errf("", "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errf("", "trailing data after the filter")
	}
	return parseNode(v, "", 0)
}

func sub(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func parseNode(v any, path string, depth int) (Expr, error) {
	if depth > maxDepth {
		return nil, errf(path, "nested deeper than %d", maxDepth)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errf(path, "want an object, got %s", kind(v))
	}
	if len(obj) != 1 {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, errf(path, "want exactly one operator, got %d %v", len(obj), keys)
	}
	for op, arg := range obj {
		p := sub(path, op)
		switch op {
		case "and", "or":
			list, ok := arg.([]any)
			if !ok {
				return nil, errf(p, "want a list of filters, got %s", kind(arg))
			}
			children := make([]Expr, len(list))
			for i, c := range list {
				e, err := parseNode(c, fmt.Sprintf("%s[%d]", p, i), depth+1)
				if err != nil {
					return nil, err
				}
				children[i] = e
			}
			if op == "and" {
				return &And{Exprs: children}, nil
			}
			return &Or{Exprs: children}, nil
		case "not":
			e, err := parseNode(arg, p, depth+1)
			if err != nil {
				return nil, err
			}
			return &Not{Expr: e}, nil
		case "exists":
			switch a := arg.(type) {
			case string:
				if a == "" {
					return nil, errf(p, "empty field name")
				}
				return &Exists{Field: a}, nil
			case map[string]any: // {"exists": {"field": "name"}}
				if f, ok := a["field"].(string); ok && len(a) == 1 && f != "" {
					return &Exists{Field: f}, nil
				}
			}
			return nil, errf(p, `want a field name or {"field": name}`)
		case "term", "terms", "range", "prefix":
			field, val, err := single(arg, p)
			if err != nil {
				return nil, err
			}
			fp := sub(p, field)
			switch op {
			case "term":
				sv, err := scalar(val, fp)
				if err != nil {
					return nil, err
				}
				return &Term{Field: field, Value: sv}, nil
			case "terms":
				list, ok := val.([]any)
				if !ok {
					return nil, errf(fp, "want a list of values, got %s", kind(val))
				}
				if len(list) == 0 {
					return nil, errf(fp, "empty list of values")
				}
				vals := make([]Value, len(list))
				for i, x := range list {
					if vals[i], err = scalar(x, fmt.Sprintf("%s[%d]", fp, i)); err != nil {
						return nil, err
					}
				}
				return &Terms{Field: field, Values: vals}, nil
			case "prefix":
				s, ok := val.(string)
				if !ok {
					return nil, errf(fp, "want a string prefix, got %s", kind(val))
				}
				return &Prefix{Field: field, Prefix: s}, nil
			case "range":
				bounds, ok := val.(map[string]any)
				if !ok || len(bounds) == 0 {
					return nil, errf(fp, `want bounds such as {"gte": 1, "lt": 5}, got %s`, kind(val))
				}
				r := &Range{Field: field}
				for k, b := range bounds {
					bv, err := scalar(b, sub(fp, k))
					if err != nil {
						return nil, err
					}
					if _, isBool := bv.(bool); isBool {
						return nil, errf(sub(fp, k), "a range bound must be a number or a date")
					}
					switch k {
					case "gt":
						r.GT = bv
					case "gte":
						r.GTE = bv
					case "lt":
						r.LT = bv
					case "lte":
						r.LTE = bv
					default:
						return nil, errf(sub(fp, k), "unknown bound (want gt, gte, lt or lte)")
					}
				}
				if r.GT != nil && r.GTE != nil {
					return nil, errf(fp, "both gt and gte")
				}
				if r.LT != nil && r.LTE != nil {
					return nil, errf(fp, "both lt and lte")
				}
				return r, nil
			}
		default:
			return nil, errf(p, "unknown operator (want term, terms, range, prefix, exists, and, or, not)")
		}
	}
	panic("unreachable")
}

// single unpacks {"field": value}.
func single(arg any, path string) (string, any, error) {
	obj, ok := arg.(map[string]any)
	if !ok || len(obj) != 1 {
		return "", nil, errf(path, `want {"field": value} with one field, got %s`, kind(arg))
	}
	for k, v := range obj {
		if k == "" {
			return "", nil, errf(path, "empty field name")
		}
		return k, v, nil
	}
	panic("unreachable")
}

func scalar(v any, path string) (Value, error) {
	switch x := v.(type) {
	case string, bool:
		return x, nil
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return nil, errf(path, "number %s out of range", x)
		}
		return f, nil
	}
	return nil, errf(path, "want a string, number or bool, got %s", kind(v))
}

func kind(v any) string {
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
