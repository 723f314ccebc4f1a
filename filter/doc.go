// Package filter is Tandem's metadata filter language: a small JSON syntax
// parsed into an AST (Expr), checked against a collection schema, and
// evaluated in Go (Match). Backends compile the AST themselves: sparse turns
// it into a Bleve query and into a bitmap of internal document numbers.
//
// # Syntax
//
// Each node is a JSON object with exactly one key:
//
//	{"term":   {"field": value}}                    equality (keyword, keywords, number, date, bool)
//	{"terms":  {"field": [value, ...]}}             any of the values
//	{"range":  {"field": {"gte": x, "lt": y}}}      numbers and dates; gt, gte, lt, lte
//	{"prefix": {"field": "abc"}}                    keyword and keywords fields
//	{"exists": "field"}                             the document has a value for field
//	{"and": [node, ...]}, {"or": [node, ...]}, {"not": node}
//
// A keywords field matches term, terms and prefix when any element does.
//
// # Limits
//
// A filter has at most Limits.MaxClauses clauses (default 1024) and nests
// at most Limits.MaxDepth levels (default 32). Every leaf is a clause:
// each term, range, prefix and exists, each value of a terms list, and
// each empty and or or. A single clause is 1 level deep, and each and, or
// and not adds one. Parse reads the JSON as a stream of tokens and stops
// at the first clause or level over a limit, so a filter of any size is
// refused at the cost of the part read, before a tree of it exists.
// `tandem serve` sets the limits with --max-filter-clauses and
// --max-filter-depth, and the engine with engine.Options.FilterLimits.
//
// # Errors
//
// Errors are *Error values whose Path names the offending node the way a
// JSON path would, for example "and[1].range.year". Parse reports syntax
// errors, and a limit exceeded with Error.Limit naming it; Check reports
// unknown fields and values of the wrong type.
//
// # Invariants
//
// Check normalises date values in place (to tandem.FormatDate form), so an
// Expr must pass Check before Match or a backend's compiler sees it. Match
// is the reference semantics: sparse.Compile must accept exactly the
// documents Match accepts, which the engine's property test checks.
//
// # Usage
//
//	e, err := filter.Parse([]byte(`{"and":[{"term":{"lang":"en"}},{"range":{"year":{"gte":2000}}}]}`))
//	if err == nil {
//		err = filter.Check(e, schema)
//	}
//	ok := filter.Match(e, schema, doc.Fields)
package filter
