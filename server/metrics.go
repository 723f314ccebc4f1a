package server

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, on a registry of its own so
// that two servers in one process (or the embedding program's metrics)
// never collide.
type metrics struct {
	reg *prometheus.Registry

	requests *prometheus.CounterVec   // route, code
	latency  *prometheus.HistogramVec // route
	// search is the engine's time per search, by collection and mode:
	// the sorted kinds of the retrievers that ran joined by "+" ("bm25",
	// "dense", "bm25+dense+late"); a mode with "+" is a fused search.
	search *prometheus.HistogramVec
	// retriever is each retriever's part of a search (engine.Result's
	// RetrieverTook), by collection and retriever ("bm25", "dense:<model>",
	// "late:<model>"), fused or not.
	retriever *prometheus.HistogramVec
	ingested  *prometheus.CounterVec // collection
	failed    *prometheus.CounterVec // collection
	deleted   *prometheus.CounterVec // collection
}

func newMetrics(reg *registry) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_http_request_duration_seconds",
			Help:    "HTTP request duration by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		search: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_search_duration_seconds",
			Help:    "Search time in the engine by collection and mode (the retriever kinds that ran, joined by '+'; several means fused).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"collection", "mode"}),
		retriever: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_retriever_duration_seconds",
			Help:    "Each retriever's time within a search, query encoding included, by collection and retriever.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"collection", "retriever"}),
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_documents_ingested_total",
			Help: "Documents stored by upserts; the ingest rate is rate() of it.",
		}, []string{"collection"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_documents_failed_total",
			Help: "Upserted lines refused (bad JSON, schema or vectors).",
		}, []string{"collection"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_documents_deleted_total",
			Help: "Documents removed by deletes.",
		}, []string{"collection"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.search, m.retriever, m.ingested, m.failed, m.deleted,
		collectionsCollector{reg},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forget removes a dropped collection's series.
func (m *metrics) forget(name string) {
	l := prometheus.Labels{"collection": name}
	m.search.DeletePartialMatch(l)
	m.retriever.DeletePartialMatch(l)
	m.ingested.DeletePartialMatch(l)
	m.failed.DeletePartialMatch(l)
	m.deleted.DeletePartialMatch(l)
}

// mode is the metric label of the retrievers that ran.
func mode(retrievers []string) string {
	kinds := make([]string, 0, len(retrievers))
	for _, r := range retrievers {
		k, _, _ := strings.Cut(r, ":")
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return strings.Join(slices.Compact(kinds), "+")
}

var (
	docsDesc = prometheus.NewDesc("tandem_documents", "Live documents per collection.", []string{"collection"}, nil)
	sizeDesc = prometheus.NewDesc("tandem_index_size_bytes", "Disk space of each part of a collection (badger, blobs, bleve, snapshots).", []string{"collection", "part"}, nil)

	// The query encodings of each model (engine.QueryEncodingStats): the
	// model's cache and runs serve every collection that uses it, so they
	// are labelled by model alone.
	queryCacheHitsDesc      = prometheus.NewDesc("tandem_query_cache_hits_total", "Query encodings answered from the model's cache.", []string{"model"}, nil)
	queryCacheMissesDesc    = prometheus.NewDesc("tandem_query_cache_misses_total", "Query encodings the model's cache did not have.", []string{"model"}, nil)
	queryCacheEvictionsDesc = prometheus.NewDesc("tandem_query_cache_evictions_total", "Query encodings dropped from the model's cache to stay within its capacity.", []string{"model"}, nil)
	queryCacheEntriesDesc   = prometheus.NewDesc("tandem_query_cache_entries", "Query encodings in the model's cache.", []string{"model"}, nil)
	queryCacheBytesDesc     = prometheus.NewDesc("tandem_query_cache_bytes", "Memory of the model's cache of query encodings.", []string{"model"}, nil)
	queryCacheCapacityDesc  = prometheus.NewDesc("tandem_query_cache_capacity_bytes", "Bound on the memory of the model's cache of query encodings (0: no cache).", []string{"model"}, nil)
	queryRunsDesc           = prometheus.NewDesc("tandem_query_encoder_runs_total", "Model runs that encoded queries; queries_total over it is the mean batch.", []string{"model"}, nil)
	queryQueriesDesc        = prometheus.NewDesc("tandem_query_encoder_queries_total", "Queries encoded by model runs (cache misses that ran).", []string{"model"}, nil)

	// The retrainings of each dense index (its IVF) and late-interaction
	// index (its residual codes), which run in the background while
	// searches and writes go on.
	retrainingDesc = prometheus.NewDesc("tandem_index_retraining", "1 while the index retrains in the background (searches and writes go on), else 0.", []string{"collection", "retriever"}, nil)
	retrainsDesc   = prometheus.NewDesc("tandem_index_retrains_total", "Retrainings of the index started since it was opened.", []string{"collection", "retriever"}, nil)
)

// collectionsCollector reads document counts and sizes from the open
// collections at each scrape, and the query encodings of their models.
type collectionsCollector struct{ reg *registry }

func (c collectionsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{docsDesc, sizeDesc, queryCacheHitsDesc, queryCacheMissesDesc, queryCacheEvictionsDesc,
		queryCacheEntriesDesc, queryCacheBytesDesc, queryCacheCapacityDesc, queryRunsDesc, queryQueriesDesc, retrainingDesc, retrainsDesc} {
		ch <- d
	}
}

func (c collectionsCollector) Collect(ch chan<- prometheus.Metric) {
	models := map[string]bool{} // reported already, by another collection
	c.reg.each(func(col *collection) {
		ch <- prometheus.MustNewConstMetric(docsDesc, prometheus.GaugeValue, float64(col.e.Count()), col.name)
		st, err := col.e.Stats()
		if err != nil {
			return
		}
		for part, n := range st.DiskBytes {
			ch <- prometheus.MustNewConstMetric(sizeDesc, prometheus.GaugeValue, float64(n), col.name, part)
		}
		retrain := func(retriever string, running bool, count int) {
			retraining := 0.0
			if running {
				retraining = 1
			}
			ch <- prometheus.MustNewConstMetric(retrainingDesc, prometheus.GaugeValue, retraining, col.name, retriever)
			ch <- prometheus.MustNewConstMetric(retrainsDesc, prometheus.CounterValue, float64(count), col.name, retriever)
		}
		for _, d := range st.Dense {
			retrain("dense:"+d.Model, d.Retraining, d.Retrains)
		}
		for _, l := range st.Late {
			retrain("late:"+l.Model, l.Retraining, l.Retrains)
		}
		for _, q := range st.QueryEncoding {
			if models[q.Model] {
				continue
			}
			models[q.Model] = true
			for _, m := range []struct {
				d *prometheus.Desc
				t prometheus.ValueType
				v float64
			}{
				{queryCacheHitsDesc, prometheus.CounterValue, float64(q.CacheHits)},
				{queryCacheMissesDesc, prometheus.CounterValue, float64(q.CacheMisses)},
				{queryCacheEvictionsDesc, prometheus.CounterValue, float64(q.CacheEvictions)},
				{queryCacheEntriesDesc, prometheus.GaugeValue, float64(q.CacheEntries)},
				{queryCacheBytesDesc, prometheus.GaugeValue, float64(q.CacheBytes)},
				{queryCacheCapacityDesc, prometheus.GaugeValue, float64(q.CacheCapacityBytes)},
				{queryRunsDesc, prometheus.CounterValue, float64(q.Runs)},
				{queryQueriesDesc, prometheus.CounterValue, float64(q.Queries)},
			} {
				ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, q.Model)
			}
		}
	})
}
