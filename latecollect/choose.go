package latecollect

// Choose is the coordinator's step of a sharded search (see the package
// documentation): given every shard's Collect for a query (cols[i] is
// shard i's; nil for a shard that collected nothing), it decides what each
// shard scores, by the rule Search applies on one index and with this
// index's options (the shards of a collection share them). With all, the
// filter allows no more documents over every shard than the candidate
// cap, and each shard scores every document it allows (Search in
// Exhaustive mode); otherwise docs[i] are shard i's candidates, to score
// with Rescore.
func (x *Index) Choose(cols []*Collection, opts *SearchOptions) (all bool, docs [][]uint64, err error) {
	var so SearchOptions
	if opts != nil {
		so = *opts
	}
	if err := x.fillSearch(&so); err != nil {
		return false, nil, err
	}
	if so.Allow != nil {
		allowed := 0
		for _, c := range cols {
			if c != nil {
				allowed += c.Allowed
			}
		}
		if allowed <= so.CandidateCap {
			return true, nil, nil
		}
	}
	docs = make([][]uint64, len(cols))
	for _, d := range MergeCandidates(cols, so.KPrime, so.CandidateCap) {
		docs[d.Shard] = append(docs[d.Shard], d.Doc)
	}
	return false, docs, nil
}
