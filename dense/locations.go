package dense

// locations is where each vector of an IVF index lies, list<<32 | offset,
// by docnum: what FAISS's own direct map would keep in a hashtable (about
// 40 bytes a vector, and a cache miss or two a lookup), kept here in a
// paged array of 8 bytes a docnum. Docnums only grow, so the pages cover
// every document the collection has held; a page is allocated at its
// first vector. A slot holds the location plus one, 0 when the docnum has
// no vector. Guarded by Index.mu.
type locations struct {
	pages [][]uint64
	n     int // docnums with a location
}

const locPageBits = 16

func (l *locations) get(num uint64) (uint64, bool) {
	p := num >> locPageBits
	if p >= uint64(len(l.pages)) || l.pages[p] == nil {
		return 0, false
	}
	v := l.pages[p][num&(1<<locPageBits-1)]
	return v - 1, v != 0
}

func (l *locations) set(num, lo uint64) {
	p := num >> locPageBits
	for p >= uint64(len(l.pages)) {
		l.pages = append(l.pages, nil)
	}
	if l.pages[p] == nil {
		l.pages[p] = make([]uint64, 1<<locPageBits)
	}
	slot := &l.pages[p][num&(1<<locPageBits-1)]
	if *slot == 0 {
		l.n++
	}
	*slot = lo + 1
}

func (l *locations) clear(num uint64) {
	p := num >> locPageBits
	if p >= uint64(len(l.pages)) || l.pages[p] == nil {
		return
	}
	slot := &l.pages[p][num&(1<<locPageBits-1)]
	if *slot != 0 {
		l.n--
	}
	*slot = 0
}
