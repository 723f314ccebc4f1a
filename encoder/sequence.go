package encoder

// sideSpec is one side's configuration resolved against the tokenizer.
type sideSpec struct {
	cfg       SideConfig
	marker    int64 // -1 when there is no marker
	mask      int64 // augmentation token id, -1 when not augmenting
	skip      map[int64]bool
	model     *model
	proj      *projection
	lead      []int64
	trail     []int64
	maxLength int
}

// sequence is one text ready for the model.
type sequence struct {
	ids  []int64
	attn []int64 // attention mask: 1 for real tokens, 0 for padding
	// keep marks the tokens whose vectors are token output: attended
	// tokens and augmentation tokens, minus skipped ones.
	keep []bool
}

// budget is the number of content tokens that fit beside the special
// tokens and the marker.
func (s *sideSpec) budget() int {
	n := s.maxLength - len(s.lead) - len(s.trail)
	if s.marker >= 0 {
		n--
	}
	return n
}

// build lays out lead, marker, truncated content, trail and augmentation.
func (s *sideSpec) build(content []int64) sequence {
	if b := s.budget(); len(content) > b {
		content = content[:b]
	}
	n := len(s.lead) + len(content) + len(s.trail)
	if s.marker >= 0 {
		n++
	}
	total := n
	if s.mask >= 0 && total < s.maxLength {
		total = s.maxLength
	}
	seq := sequence{ids: make([]int64, 0, total), attn: make([]int64, total), keep: make([]bool, total)}
	seq.ids = append(seq.ids, s.lead...)
	if s.marker >= 0 {
		seq.ids = append(seq.ids, s.marker)
	}
	seq.ids = append(seq.ids, content...)
	seq.ids = append(seq.ids, s.trail...)
	for i, id := range seq.ids {
		seq.attn[i] = 1
		seq.keep[i] = !s.skip[id]
	}
	var augAttn int64
	if s.cfg.AttendToAugment {
		augAttn = 1
	}
	for i := n; i < total; i++ {
		seq.ids = append(seq.ids, s.mask)
		seq.attn[i] = augAttn
		seq.keep[i] = true
	}
	return seq
}
