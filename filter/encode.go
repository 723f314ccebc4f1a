package filter

import (
	"encoding/json"
	"fmt"
)

// Encode writes e in the JSON syntax Parse reads, so that Parse(Encode(e))
// is e again (String equal): a filter made or changed in Go (the engine
// drops a facet's own clauses from a request's filter) can travel in a
// request, as package cluster sends it to shards. Values keep their Go
// form: strings, float64 and bools.
func Encode(e Expr) ([]byte, error) {
	v, err := encode(e)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func encode(e Expr) (any, error) {
	obj := func(op string, v any) map[string]any { return map[string]any{op: v} }
	switch x := e.(type) {
	case *Term:
		return obj("term", map[string]any{x.Field: x.Value}), nil
	case *Terms:
		return obj("terms", map[string]any{x.Field: x.Values}), nil
	case *Range:
		b := map[string]any{}
		for k, v := range map[string]Value{"gt": x.GT, "gte": x.GTE, "lt": x.LT, "lte": x.LTE} {
			if v != nil {
				b[k] = v
			}
		}
		return obj("range", map[string]any{x.Field: b}), nil
	case *Prefix:
		return obj("prefix", map[string]any{x.Field: x.Prefix}), nil
	case *Exists:
		return obj("exists", x.Field), nil
	case *And, *Or:
		op, kids := "and", []Expr(nil)
		if a, ok := x.(*And); ok {
			kids = a.Exprs
		} else {
			op, kids = "or", x.(*Or).Exprs
		}
		out := make([]any, len(kids))
		for i, k := range kids {
			v, err := encode(k)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return obj(op, out), nil
	case *Not:
		v, err := encode(x.Expr)
		if err != nil {
			return nil, err
		}
		return obj("not", v), nil
	}
	return nil, fmt.Errorf("filter: encode: unknown expression %T", e)
}
