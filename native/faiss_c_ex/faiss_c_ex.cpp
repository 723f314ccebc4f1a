// Tandem's implementation of the FAISS C API extensions that
// github.com/blevesearch/go-faiss v1.1.5 calls and FAISS 1.7.3 lacks.
// Declarations and the list of known limits are in tandem_ex_c.h.
//
// Every entry point catches C++ exceptions and turns them into an error code
// plus a message for faiss_get_last_error(), as the upstream C API does
// (CATCH_AND_HANDLE from the upstream macros_impl.h).

#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/index_io_c.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <faiss/Index.h>
#include <faiss/IndexBinary.h>
#include <faiss/IndexBinaryFlat.h>
#include <faiss/IndexBinaryIVF.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexFlatCodes.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIDMap.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexPreTransform.h>
#include <faiss/IndexScalarQuantizer.h>
#include <faiss/IndexShards.h>
#include <faiss/clone_index.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/FaissAssert.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/impl/io.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>
#include <faiss/utils/distances.h>
#include <faiss/invlists/DirectMap.h>
#include <faiss/utils/Heap.h>
#include <faiss/utils/hamming.h>
#include <faiss/utils/utils.h>

#include "macros_impl.h"

// idx_t is the C API's int64_t id type (faiss_c.h).

namespace {

// BitmapSelector owns a copy of the caller's bitmap. FAISS 1.7.3's
// IDSelectorBitmap keeps the pointer it is given, which for go-faiss is Go
// memory that cgo forbids C to retain after the call.
// With a shift, the bitmap is over id >> shift: Tandem's token ids are a
// document number shifted left past the token's position, and a bitmap of
// documents is smaller than one of tokens by 2^shift.
struct BitmapSelector : faiss::IDSelector {
    std::vector<uint8_t> bits;
    int shift;
    BitmapSelector(size_t n, const uint8_t* bitmap, int shift = 0)
            : bits(bitmap, bitmap + n), shift(shift) {}
    bool is_member(idx_t id) const override {
        if (id < 0) {
            return false;
        }
        id >>= shift;
        size_t byte = size_t(id) >> 3;
        return byte < bits.size() && ((bits[byte] >> (id & 7)) & 1);
    }
};

// TranslatedSelector applies a selector over external ids to the internal
// ids of an IndexIDMap's sub-index.
struct TranslatedSelector : faiss::IDSelector {
    const std::vector<idx_t>& id_map;
    const faiss::IDSelector* sel;
    TranslatedSelector(const std::vector<idx_t>& id_map, const faiss::IDSelector* sel)
            : id_map(id_map), sel(sel) {}
    bool is_member(idx_t id) const override {
        return id >= 0 && size_t(id) < id_map.size() && sel->is_member(id_map[id]);
    }
};

const std::vector<idx_t>* id_map_of(const faiss::Index* index, const faiss::Index** sub) {
    if (auto m = dynamic_cast<const faiss::IndexIDMap*>(index)) {
        *sub = m->index;
        return &m->id_map;
    }
    return nullptr;
}

const faiss::IndexIVF* as_ivf(const faiss::Index* index) {
    return dynamic_cast<const faiss::IndexIVF*>(index);
}

// search_dispatch searches index with params, adapting the parameters to what
// each FAISS 1.7.3 index type accepts:
//   - IndexIDMap(2): params are rejected, so the selector is translated to
//     the sub-index's ids and the labels mapped back;
//   - IndexPreTransform: the chain is applied here and the sub-index searched;
//   - IndexIVF: plain parameters become IVF parameters with the index's own
//     nprobe and max_codes;
//   - IndexHNSW: plain parameters become HNSW parameters with its efSearch.
void search_dispatch(
        const faiss::Index* index,
        idx_t n,
        const float* x,
        idx_t k,
        const faiss::SearchParameters* params,
        float* distances,
        idx_t* labels) {
    if (params == nullptr) {
        index->search(n, x, k, distances, labels);
        return;
    }
    const faiss::Index* sub = nullptr;
    if (const std::vector<idx_t>* id_map = id_map_of(index, &sub)) {
        std::unique_ptr<TranslatedSelector> tsel;
        faiss::SearchParameters plain;
        faiss::SearchParametersIVF ivf;
        const faiss::SearchParameters* sub_params = params;
        if (params->sel) {
            tsel.reset(new TranslatedSelector(*id_map, params->sel));
            if (auto p = dynamic_cast<const faiss::SearchParametersIVF*>(params)) {
                ivf.nprobe = p->nprobe;
                ivf.max_codes = p->max_codes;
                ivf.quantizer_params = p->quantizer_params;
                ivf.sel = tsel.get();
                sub_params = &ivf;
            } else {
                plain.sel = tsel.get();
                sub_params = &plain;
            }
        }
        search_dispatch(sub, n, x, k, sub_params, distances, labels);
        for (idx_t i = 0; i < n * k; i++) {
            if (labels[i] >= 0) {
                labels[i] = (*id_map)[labels[i]];
            }
        }
        return;
    }
    if (auto pt = dynamic_cast<const faiss::IndexPreTransform*>(index)) {
        const float* xt = pt->apply_chain(n, x);
        std::unique_ptr<const float[]> del(xt == x ? nullptr : xt);
        search_dispatch(pt->index, n, xt, k, params, distances, labels);
        return;
    }
    if (auto ivf = as_ivf(index)) {
        if (dynamic_cast<const faiss::SearchParametersIVF*>(params) == nullptr) {
            faiss::SearchParametersIVF p;
            p.sel = params->sel;
            p.nprobe = ivf->nprobe;
            p.max_codes = ivf->max_codes;
            index->search(n, x, k, distances, labels, &p);
            return;
        }
    }
    if (auto hnsw = dynamic_cast<const faiss::IndexHNSW*>(index)) {
        if (dynamic_cast<const faiss::SearchParametersHNSW*>(params) == nullptr) {
            faiss::SearchParametersHNSW p;
            p.sel = params->sel;
            p.efSearch = hnsw->hnsw.efSearch;
            index->search(n, x, k, distances, labels, &p);
            return;
        }
    }
    index->search(n, x, k, distances, labels, params);
}

size_t index_bytes(const faiss::Index* index);

size_t invlists_bytes(const faiss::InvertedLists* il) {
    if (il == nullptr) {
        return 0;
    }
    size_t total = 0;
    for (size_t i = 0; i < il->nlist; i++) {
        total += il->list_size(i) * (il->code_size + sizeof(idx_t));
    }
    return total;
}

size_t index_bytes(const faiss::Index* index) {
    if (index == nullptr) {
        return 0;
    }
    const faiss::Index* sub = nullptr;
    if (const std::vector<idx_t>* id_map = id_map_of(index, &sub)) {
        size_t total = id_map->size() * sizeof(idx_t) + index_bytes(sub);
        if (auto m2 = dynamic_cast<const faiss::IndexIDMap2*>(index)) {
            // unordered_map node: key, value and about two pointers.
            total += m2->rev_map.size() * (2 * sizeof(idx_t) + 2 * sizeof(void*));
        }
        return total;
    }
    if (auto pt = dynamic_cast<const faiss::IndexPreTransform*>(index)) {
        return index_bytes(pt->index);
    }
    if (auto ivf = as_ivf(index)) {
        return invlists_bytes(ivf->invlists) + index_bytes(ivf->quantizer);
    }
    if (auto hnsw = dynamic_cast<const faiss::IndexHNSW*>(index)) {
        return hnsw->hnsw.neighbors.size() * sizeof(faiss::HNSW::storage_idx_t) +
                hnsw->hnsw.offsets.size() * sizeof(size_t) +
                hnsw->hnsw.levels.size() * sizeof(int) + index_bytes(hnsw->storage);
    }
    if (auto fc = dynamic_cast<const faiss::IndexFlatCodes*>(index)) {
        return fc->codes.size();
    }
    return 0;
}

void check_direct_map_type(int type) {
    FAISS_THROW_IF_NOT_MSG(
            type >= faiss::DirectMap::NoMap && type <= faiss::DirectMap::Hashtable,
            "invalid direct map type");
}

void check_no_selector_binary(const faiss::SearchParameters* params) {
    FAISS_THROW_IF_NOT_MSG(
            params == nullptr || params->sel == nullptr,
            "selectors are not supported on binary indexes in FAISS 1.7.3");
}

void check_buffer_flags(int io_flags) {
    FAISS_THROW_IF_NOT_MSG(
            (io_flags &
             (FAISS_IO_FLAG_MMAP | FAISS_IO_FLAG_ONDISK_IVF | FAISS_IO_FLAG_READ_MMAP)) == 0,
            "an index read from a memory buffer cannot be memory-mapped");
}

int faiss_io_flags(int io_flags) {
    // Of the flags go-faiss names, only read-only means something to FAISS
    // 1.7.3 when reading from memory; prefetch hints do not apply.
    return io_flags & FAISS_IO_FLAG_READ_ONLY;
}

void copy_out(const std::vector<uint8_t>& data, size_t* size, unsigned char** buf) {
    *buf = nullptr;
    *size = 0;
    unsigned char* out = static_cast<unsigned char*>(malloc(std::max<size_t>(data.size(), 1)));
    FAISS_THROW_IF_NOT_MSG(out != nullptr, "out of memory writing index");
    memcpy(out, data.data(), data.size());
    *buf = out;
    *size = data.size();
}

// list_vector_count fills counts[l] with the number of vectors of list l
// that sel selects (all of them when sel is NULL), for float and binary IVF.
template <typename IVF>
void list_vector_count(const IVF* ivf, idx_t* counts, size_t nlist, const faiss::SearchParameters* params) {
    FAISS_THROW_IF_NOT_MSG(nlist <= ivf->nlist, "nlist exceeds the index's lists");
    const faiss::IDSelector* sel = params ? params->sel : nullptr;
    for (size_t l = 0; l < nlist; l++) {
        size_t size = ivf->invlists->list_size(l);
        if (sel == nullptr) {
            counts[l] = idx_t(size);
            continue;
        }
        faiss::InvertedLists::ScopedIds ids(ivf->invlists, l);
        idx_t count = 0;
        for (size_t j = 0; j < size; j++) {
            count += sel->is_member(ids[j]) ? 1 : 0;
        }
        counts[l] = count;
    }
}

// centroids_and_cardinality copies each list's centroid (stride elements
// of T), size and number, for float and binary IVF; NULL outputs are skipped.
template <typename IVF, typename T>
void centroids_and_cardinality(
        const IVF* ivf,
        size_t stride,
        T* centroids,
        size_t* cardinalities,
        idx_t* centroid_ids) {
    for (size_t l = 0; l < ivf->nlist; l++) {
        if (centroids) {
            ivf->quantizer->reconstruct(l, centroids + l * stride);
        }
        if (cardinalities) {
            cardinalities[l] = ivf->invlists->list_size(l);
        }
        if (centroid_ids) {
            centroid_ids[l] = idx_t(l);
        }
    }
}

} // namespace

extern "C" {

// ---- selectors ----

int faiss_IDSelectorBitmap_new(FaissIDSelectorBitmap** p_sel, size_t n, const uint8_t* bitmap) {
    try {
        FAISS_THROW_IF_NOT_MSG(p_sel != nullptr, "p_sel is NULL");
        FAISS_THROW_IF_NOT_MSG(n == 0 || bitmap != nullptr, "bitmap is NULL");
        *p_sel = reinterpret_cast<FaissIDSelectorBitmap*>(
                static_cast<faiss::IDSelector*>(new BitmapSelector(n, bitmap)));
    }
    CATCH_AND_HANDLE
}

int faiss_IDSelectorBitmapShifted_new(
        FaissIDSelector** p_sel,
        size_t n,
        const uint8_t* bitmap,
        int shift) {
    try {
        FAISS_THROW_IF_NOT_MSG(p_sel != nullptr, "p_sel is NULL");
        FAISS_THROW_IF_NOT_MSG(n == 0 || bitmap != nullptr, "bitmap is NULL");
        FAISS_THROW_IF_NOT_MSG(shift >= 0 && shift < 63, "shift out of range");
        *p_sel = reinterpret_cast<FaissIDSelector*>(
                static_cast<faiss::IDSelector*>(new BitmapSelector(n, bitmap, shift)));
    }
    CATCH_AND_HANDLE
}

int faiss_IDSelectorNot_new(FaissIDSelectorNot** p_sel, const FaissIDSelector* sel) {
    try {
        FAISS_THROW_IF_NOT_MSG(p_sel != nullptr && sel != nullptr, "selector is NULL");
        *p_sel = reinterpret_cast<FaissIDSelectorNot*>(
                static_cast<faiss::IDSelector*>(new faiss::IDSelectorNot(
                        reinterpret_cast<const faiss::IDSelector*>(sel))));
    }
    CATCH_AND_HANDLE
}

// ---- search parameters ----

int faiss_SearchParameters_new(FaissSearchParameters** p_sp, FaissIDSelector* sel) {
    try {
        auto sp = new faiss::SearchParameters();
        sp->sel = reinterpret_cast<faiss::IDSelector*>(sel);
        *p_sp = reinterpret_cast<FaissSearchParameters*>(sp);
    }
    CATCH_AND_HANDLE
}

int faiss_SearchParametersIVF_new_with(
        FaissSearchParameters** p_sp,
        FaissIDSelector* sel,
        size_t nprobe,
        size_t max_codes) {
    try {
        FAISS_THROW_IF_NOT_MSG(nprobe > 0, "nprobe must be positive");
        auto sp = new faiss::SearchParametersIVF();
        sp->sel = reinterpret_cast<faiss::IDSelector*>(sel);
        sp->nprobe = nprobe;
        sp->max_codes = max_codes;
        *p_sp = reinterpret_cast<FaissSearchParameters*>(
                static_cast<faiss::SearchParameters*>(sp));
    }
    CATCH_AND_HANDLE
}

int faiss_SearchParametersRaBitQ_new_with(
        FaissSearchParameters** p_sp,
        FaissIDSelector*,
        size_t,
        size_t) {
    try {
        *p_sp = nullptr;
        FAISS_THROW_MSG("RaBitQ is not available in FAISS 1.7.3");
    }
    CATCH_AND_HANDLE
}

size_t faiss_SearchParametersIVF_nprobe(const FaissSearchParameters* sp) {
    auto p = dynamic_cast<const faiss::SearchParametersIVF*>(
            reinterpret_cast<const faiss::SearchParameters*>(sp));
    return p ? p->nprobe : 0;
}

void faiss_SearchParameters_free(FaissSearchParameters* sp) {
    delete reinterpret_cast<faiss::SearchParameters*>(sp);
}

// ---- Index ----

int faiss_Index_search_with_params(
        const FaissIndex* index,
        idx_t n,
        const float* x,
        idx_t k,
        const FaissSearchParameters* params,
        float* distances,
        idx_t* labels) {
    try {
        search_dispatch(
                reinterpret_cast<const faiss::Index*>(index),
                n,
                x,
                k,
                reinterpret_cast<const faiss::SearchParameters*>(params),
                distances,
                labels);
    }
    CATCH_AND_HANDLE
}

int faiss_Index_size(const FaissIndex* index, size_t* size) {
    try {
        *size = index_bytes(reinterpret_cast<const faiss::Index*>(index));
    }
    CATCH_AND_HANDLE
}

int faiss_Index_reconstruct_batch(
        const FaissIndex* index,
        idx_t n,
        const idx_t* keys,
        float* recons) {
    try {
        reinterpret_cast<const faiss::Index*>(index)->reconstruct_batch(n, keys, recons);
    }
    CATCH_AND_HANDLE
}

int faiss_Index_merge_from(FaissIndex* index, FaissIndex* other, idx_t add_id) {
    try {
        reinterpret_cast<faiss::Index*>(index)->merge_from(
                *reinterpret_cast<faiss::Index*>(other), add_id);
    }
    CATCH_AND_HANDLE
}

int faiss_Index_dist_compute(
        const FaissIndex* index,
        const float* query,
        const idx_t* ids,
        size_t n,
        float* distances) {
    try {
        auto idx = reinterpret_cast<const faiss::Index*>(index);
        std::vector<float> v(idx->d);
        for (size_t i = 0; i < n; i++) {
            idx->reconstruct(ids[i], v.data());
            switch (idx->metric_type) {
                case faiss::METRIC_INNER_PRODUCT:
                    distances[i] = faiss::fvec_inner_product(query, v.data(), idx->d);
                    break;
                case faiss::METRIC_L2:
                    distances[i] = faiss::fvec_L2sqr(query, v.data(), idx->d);
                    break;
                default:
                    FAISS_THROW_MSG("dist_compute supports the L2 and inner product metrics");
            }
        }
    }
    CATCH_AND_HANDLE
}

int faiss_IndexFlat_data(
        const FaissIndex* index,
        const float** xb,
        const idx_t** ids,
        idx_t* n) {
    try {
        auto idx = reinterpret_cast<const faiss::Index*>(index);
        const faiss::Index* sub = idx;
        const std::vector<idx_t>* map = id_map_of(idx, &sub);
        auto flat = dynamic_cast<const faiss::IndexFlat*>(sub);
        *xb = nullptr;
        *ids = nullptr;
        *n = 0;
        if (flat) {
            *xb = flat->get_xb();
            *ids = map ? map->data() : nullptr;
            *n = flat->ntotal;
        }
    }
    CATCH_AND_HANDLE
}

int faiss_Set_quantizers(FaissIndex* index, FaissIndex* src) {
    try {
        auto dst = reinterpret_cast<faiss::Index*>(index);
        auto from = reinterpret_cast<faiss::Index*>(src);
        FAISS_THROW_IF_NOT_MSG(dst->d == from->d, "dimension mismatch");
        FAISS_THROW_IF_NOT_MSG(dst->ntotal == 0, "the target index must be empty");
        if (auto divf = dynamic_cast<faiss::IndexIVF*>(dst)) {
            auto sivf = dynamic_cast<faiss::IndexIVF*>(from);
            FAISS_THROW_IF_NOT_MSG(sivf != nullptr, "source is not an IVF index");
            FAISS_THROW_IF_NOT_MSG(divf->nlist == sivf->nlist, "nlist mismatch");
            FAISS_THROW_IF_NOT_MSG(divf->code_size == sivf->code_size, "code size mismatch");
            faiss::Index* q = faiss::clone_index(sivf->quantizer);
            if (divf->own_fields) {
                delete divf->quantizer;
            }
            divf->quantizer = q;
            divf->own_fields = true;
            if (auto dsq = dynamic_cast<faiss::IndexIVFScalarQuantizer*>(dst)) {
                auto ssq = dynamic_cast<faiss::IndexIVFScalarQuantizer*>(from);
                FAISS_THROW_IF_NOT_MSG(ssq != nullptr, "source is not an IVF scalar quantizer");
                dsq->sq = ssq->sq;
            }
            divf->is_trained = sivf->is_trained;
            return 0;
        }
        if (auto dsq = dynamic_cast<faiss::IndexScalarQuantizer*>(dst)) {
            auto ssq = dynamic_cast<faiss::IndexScalarQuantizer*>(from);
            FAISS_THROW_IF_NOT_MSG(ssq != nullptr, "source is not a scalar quantizer index");
            dsq->sq = ssq->sq;
            dsq->is_trained = ssq->is_trained;
            return 0;
        }
        FAISS_THROW_MSG("set_quantizers supports IVF and scalar quantizer indexes");
    }
    CATCH_AND_HANDLE
}

// ---- IndexIVF ----

int faiss_IndexIVF_set_direct_map(FaissIndexIVF* index, int direct_map_type) {
    try {
        check_direct_map_type(direct_map_type);
        reinterpret_cast<faiss::IndexIVF*>(index)->set_direct_map_type(
                faiss::DirectMap::Type(direct_map_type));
    }
    CATCH_AND_HANDLE
}

namespace {

// ivf_of returns index as an IVF index with in-memory lists and no direct
// map, as the located functions need.
faiss::IndexIVF* ivf_of(FaissIndex* index, faiss::ArrayInvertedLists** lists) {
    auto ivf = dynamic_cast<faiss::IndexIVF*>(reinterpret_cast<faiss::Index*>(index));
    FAISS_THROW_IF_NOT_MSG(ivf, "not an IVF index");
    auto arrays = dynamic_cast<faiss::ArrayInvertedLists*>(ivf->invlists);
    FAISS_THROW_IF_NOT_MSG(arrays, "not in-memory inverted lists");
    if (lists != nullptr) {
        *lists = arrays;
    }
    return ivf;
}

uint64_t lo_of(size_t list, size_t offset) {
    return uint64_t(list) << 32 | uint64_t(offset);
}

} // namespace

int faiss_IndexIVF_add_located_assigned(
        FaissIndex* index, idx_t n, const float* x, const idx_t* ids, const idx_t* assign,
        idx_t* out_ids, uint64_t* out_lo) {
    try {
        faiss::ArrayInvertedLists* lists;
        auto ivf = ivf_of(index, &lists);
        FAISS_THROW_IF_NOT_MSG(ivf->direct_map.type == faiss::DirectMap::NoMap, "the index has a direct map");
        for (idx_t i = 0; i < n; i++) {
            FAISS_THROW_IF_NOT_MSG(assign[i] >= 0 && size_t(assign[i]) < ivf->nlist, "a list out of range");
        }
        std::vector<size_t> before(ivf->nlist);
        for (size_t l = 0; l < ivf->nlist; l++) {
            before[l] = lists->ids[l].size();
        }
        ivf->add_core(n, x, ids, assign);
        idx_t j = 0;
        for (size_t l = 0; l < ivf->nlist; l++) {
            for (size_t o = before[l]; o < lists->ids[l].size(); o++) {
                FAISS_THROW_IF_NOT_MSG(j < n, "more vectors appeared than were added");
                out_ids[j] = lists->ids[l][o];
                out_lo[j] = lo_of(l, o);
                j++;
            }
        }
        FAISS_THROW_IF_NOT_MSG(j == n, "fewer vectors appeared than were added");
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_assign(const FaissIndex* index, idx_t n, const float* x, idx_t* assign) {
    try {
        auto ivf = dynamic_cast<const faiss::IndexIVF*>(reinterpret_cast<const faiss::Index*>(index));
        FAISS_THROW_IF_NOT_MSG(ivf, "not an IVF index");
        FAISS_THROW_IF_NOT_MSG(ivf->is_trained, "the index is not trained");
        ivf->quantizer->assign(n, x, assign);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_train_threaded(FaissIndex* index, idx_t n, const float* x, int threads) {
    try {
        auto ivf = ivf_of(index, nullptr);
        // A flat quantizer is always "trained"; it needs k-means while it
        // holds fewer than nlist centroids (train_q1).
        bool clusters = ivf->quantizer_trains_alone == 0 && size_t(ivf->quantizer->ntotal) != ivf->nlist;
        if (threads <= 1 || !clusters) {
            ivf->train(n, x);
            return 0;
        }
        faiss::IndexShards shards(int(ivf->d), true, true);
        shards.metric_type = ivf->metric_type;
        std::vector<std::unique_ptr<faiss::Index>> flats;
        for (int t = 0; t < threads; t++) {
            if (ivf->metric_type == faiss::METRIC_INNER_PRODUCT) {
                flats.emplace_back(new faiss::IndexFlatIP(ivf->d));
            } else {
                flats.emplace_back(new faiss::IndexFlatL2(ivf->d));
            }
            shards.add_shard(flats.back().get());
        }
        struct restore {
            faiss::IndexIVF* ivf;
            ~restore() { ivf->clustering_index = nullptr; }
        } guard{ivf};
        ivf->clustering_index = &shards;
        ivf->train(n, x);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_remove_located(
        FaissIndex* index,
        idx_t n,
        const idx_t* ids,
        const uint64_t* lo,
        idx_t* moved_ids,
        uint64_t* moved_lo,
        size_t* n_moved) {
    try {
        faiss::ArrayInvertedLists* lists;
        auto ivf = ivf_of(index, &lists);
        FAISS_THROW_IF_NOT_MSG(ivf->direct_map.type == faiss::DirectMap::NoMap, "the index has a direct map");
        // Where vectors moved in this call: a later id of the call may be
        // one of them, and the caller's location for it is then stale.
        std::unordered_map<idx_t, uint64_t> moved;
        const size_t cs = ivf->code_size;
        for (idx_t i = 0; i < n; i++) {
            uint64_t at = lo[i];
            auto m = moved.find(ids[i]);
            if (m != moved.end()) {
                at = m->second;
                moved.erase(m);
            }
            size_t l = faiss::lo_listno(at), o = faiss::lo_offset(at);
            FAISS_THROW_IF_NOT_MSG(
                    l < ivf->nlist && o < lists->ids[l].size() && lists->ids[l][o] == ids[i],
                    "a location does not hold its id: the caller's locations are out of date");
            size_t last = lists->ids[l].size() - 1;
            if (o < last) {
                idx_t last_id = lists->ids[l][last];
                lists->ids[l][o] = last_id;
                std::memcpy(&lists->codes[l][o * cs], &lists->codes[l][last * cs], cs);
                moved[last_id] = lo_of(l, o);
            }
            lists->resize(l, last);
            ivf->ntotal--;
        }
        size_t j = 0;
        for (const auto& m : moved) {
            moved_ids[j] = m.first;
            moved_lo[j] = m.second;
            j++;
        }
        *n_moved = j;
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_locate_all(const FaissIndex* index, idx_t* out_ids, uint64_t* out_lo) {
    try {
        faiss::ArrayInvertedLists* lists;
        auto ivf = ivf_of(const_cast<FaissIndex*>(index), &lists);
        size_t j = 0;
        for (size_t l = 0; l < ivf->nlist; l++) {
            for (size_t o = 0; o < lists->ids[l].size(); o++) {
                FAISS_THROW_IF_NOT_MSG(j < size_t(ivf->ntotal), "lists hold more than ntotal vectors");
                out_ids[j] = lists->ids[l][o];
                out_lo[j] = lo_of(l, o);
                j++;
            }
        }
        FAISS_THROW_IF_NOT_MSG(j == size_t(ivf->ntotal), "lists hold fewer than ntotal vectors");
    }
    CATCH_AND_HANDLE
}

extern "C++" {
namespace {

// sq8Weights turns an inner-product query into weights on an 8-bit scalar
// quantiser's codes. The quantiser decodes component j of a code c as
// vmin[j] + (c[j] + 0.5) / 255 * vdiff[j] (the QT_8bit codec, "SQ8"), so the inner product of the query q with the decoded vector is
// base + sum_j w[j] * c[j], with w[j] = q[j] * vdiff[j] / 255 and base =
// sum_j q[j] * (vmin[j] + vdiff[j] / 510): one multiply-add a component
// instead of decoding each component first. The sum is FAISS's to float
// rounding, added in another order.
struct sq8Weights {
    std::vector<float> w;
    float base = 0;
    bool residual = false; // codes encode the residual from the list's centroid
};

// sq8WeightsFor returns the weights of query x for ivf's codes, or false
// when its codes are not 8-bit scalar-quantised components scored by inner
// product.
bool sq8WeightsFor(const faiss::IndexIVF* ivf, const float* x, sq8Weights* out) {
    auto sq = dynamic_cast<const faiss::IndexIVFScalarQuantizer*>(ivf);
    if (sq == nullptr || ivf->metric_type != faiss::METRIC_INNER_PRODUCT ||
        ivf->code_size != size_t(ivf->d)) {
        return false;
    }
    size_t d = ivf->d;
    const std::vector<float>& tr = sq->sq.trained;
    if (sq->sq.qtype != faiss::ScalarQuantizer::QT_8bit || tr.size() != 2 * d) {
        return false;
    }
    out->w.resize(d);
    double base = 0;
    for (size_t j = 0; j < d; j++) {
        float vmin = tr[j], vdiff = tr[d + j];
        out->w[j] = x[j] * vdiff / 255.0f;
        base += double(x[j]) * (double(vmin) + double(vdiff) / 510.0);
    }
    out->base = float(base);
    out->residual = sq->by_residual;
    return true;
}

float dotU8Portable(const float* w, const uint8_t* c, size_t d) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= d; j += 8) {
        for (size_t u = 0; u < 8; u++) {
            a[u] += w[j + u] * float(c[j + u]);
        }
    }
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; j < d; j++) {
        s += w[j] * float(c[j]);
    }
    return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float dotU8AVX2(const float* w, const uint8_t* c, size_t d) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= d; j += 16) {
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j));
        __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
        a0 = _mm256_fmadd_ps(f0, _mm256_loadu_ps(w + j), a0);
        a1 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(w + j + 8), a1);
    }
    a0 = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; j < d; j++) {
        s += w[j] * float(c[j]);
    }
    return s;
}
#endif

using dotU8Func = float (*)(const float*, const uint8_t*, size_t);

dotU8Func dotU8() {
#if defined(__x86_64__)
    static const dotU8Func f = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            ? dotU8AVX2
            : dotU8Portable;
    return f;
#else
    return dotU8Portable;
#endif
}

// locatedTable reads the caller's locations: pages of 2^bits slots by id,
// each holding a location plus one, 0 for an id without a vector (the
// layout of faiss.Locations).
struct locatedTable {
    const uint64_t* const* pages;
    size_t npages;
    int bits;

    const uint64_t* slot(uint64_t id) const {
        uint64_t p = id >> bits;
        if (p >= npages || pages[p] == nullptr) {
            return nullptr;
        }
        return pages[p] + (id & ((uint64_t(1) << bits) - 1));
    }
};

// Below this many ids a located search runs on the calling thread only:
// the team's start costs more than half of the scan.
const idx_t locatedParallelMin = 4096;

// search_located scores the codes of the vectors with ids (in ascending
// order) at the locations the table holds, skipping ids without one, and
// keeps the k best in the heap C (CMin for inner product, where larger is
// better). A selective filter's codes lie scattered over the lists, so the
// scan is bound by memory latency: the codes some way ahead are
// prefetched, and the ids are split between OpenMP's threads, each with
// its own heap. 8-bit scalar codes scored by inner product (the automatic
// IVF index's) are scored by weights on the codes (sq8Weights); other
// codes by the index's own scanner, one a thread, whose set_list only
// records the list's centroid distance, so nothing is grouped.
template <class C>
void search_located(
        const faiss::IndexIVF* ivf,
        const faiss::ArrayInvertedLists* lists,
        const float* x,
        idx_t n,
        const uint64_t* ids,
        const locatedTable& table,
        idx_t nprobe,
        idx_t k,
        float* distances,
        idx_t* labels) {
    const size_t cs = ivf->code_size;
    faiss::heap_heapify<C>(k, distances, labels);
    if (n == 0) {
        return;
    }
    // The location of ids[i]'s code, or nullptr without one; one outside
    // the lists is the caller's error.
    std::atomic<bool> stale{false};
    auto code = [&](idx_t i, size_t* list) -> const uint8_t* {
        const uint64_t* s = table.slot(ids[i]);
        if (s == nullptr || *s == 0) {
            return nullptr;
        }
        uint64_t at = *s - 1;
        size_t l = faiss::lo_listno(at), o = faiss::lo_offset(at);
        if (l >= ivf->nlist || o >= lists->ids[l].size()) {
            stale = true;
            return nullptr;
        }
        *list = l;
        return lists->codes[l].data() + o * cs;
    };
    bool ip = ivf->metric_type == faiss::METRIC_INNER_PRODUCT;
    sq8Weights sw;
    bool sq8 = sq8WeightsFor(ivf, x, &sw);
    // Centroid distances, which codes by residual add: with many lists
    // touched, all at once (each thread a share of a flat quantizer's
    // rows); otherwise each list's, before the scan.
    auto flat = dynamic_cast<const faiss::IndexFlat*>(ivf->quantizer);
    // Scoring only the ids in the nprobe nearest lists needs every list's
    // centroid distance.
    bool probe = nprobe > 0 && size_t(nprobe) < ivf->nlist && flat != nullptr;
    bool coarseNeeded = probe || (sq8 ? sw.residual : true);
    std::vector<float> cdis;
    bool allAtOnce = coarseNeeded && flat != nullptr && (probe || size_t(n) * 4 > ivf->nlist);
    auto fillCdis = [&](size_t lb, size_t le) {
        if (ip) {
            faiss::fvec_inner_products_ny(cdis.data() + lb, x, flat->get_xb() + lb * ivf->d, ivf->d, le - lb);
        } else {
            faiss::fvec_L2sqr_ny(cdis.data() + lb, x, flat->get_xb() + lb * ivf->d, ivf->d, le - lb);
        }
    };
    if (coarseNeeded) {
        cdis.assign(ivf->nlist, std::numeric_limits<float>::quiet_NaN());
        if (!allAtOnce) {
            std::vector<float> centroid(ivf->d);
            for (idx_t i = 0; i < n; i++) {
                size_t l;
                if (code(i, &l) != nullptr && std::isnan(cdis[l])) {
                    ivf->quantizer->reconstruct(l, centroid.data());
                    cdis[l] = ip ? faiss::fvec_inner_product(x, centroid.data(), ivf->d)
                                 : faiss::fvec_L2sqr(x, centroid.data(), ivf->d);
                }
            }
        }
    }
    int nt = n >= locatedParallelMin ? std::max(1, omp_get_max_threads()) : 1;
    // The distance of the nprobe-th nearest list: a list at least as near
    // is probed (ties included).
    float cut = 0;
    // C::cmp(a, b) is true when b is better than a.
    auto probed = [&](size_t l) { return !probe || !C::cmp(cdis[l], cut); };
    std::vector<float> td(size_t(nt) * k);
    std::vector<idx_t> tl(size_t(nt) * k);
    std::atomic<bool> failed{false};
    std::string failure;
    dotU8Func dot = dotU8();
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num();
        if (allAtOnce) {
            fillCdis(ivf->nlist * t / nt, ivf->nlist * (t + 1) / nt);
#pragma omp barrier
            if (probe) {
#pragma omp single
                {
                    // The best first, to the nprobe-th.
                    std::vector<float> order(cdis);
                    std::nth_element(order.begin(), order.begin() + (nprobe - 1), order.end(),
                                     [](float a, float b) { return C::cmp(b, a); });
                    cut = order[nprobe - 1];
                }
            }
        }
        try {
            std::unique_ptr<faiss::InvertedListScanner> sc;
            if (!sq8) {
                sc.reset(ivf->get_InvertedListScanner(false));
                sc->set_query(x);
            }
            float* D = td.data() + size_t(t) * k;
            idx_t* L = tl.data() + size_t(t) * k;
            faiss::heap_heapify<C>(k, D, L);
            idx_t b = n * t / nt, e = n * (t + 1) / nt;
            const idx_t ahead = 16;
            auto prefetch = [&](idx_t i) {
                size_t l;
                if (const uint8_t* c = code(i, &l); c != nullptr && probed(l)) {
                    for (size_t o = 0; o < cs; o += 64) {
                        __builtin_prefetch(c + o);
                    }
                }
            };
            for (idx_t i = b; i < std::min(b + ahead, e); i++) {
                prefetch(i);
            }
            for (idx_t i = b; i < e; i++) {
                if (i + 4 * ahead < e) {
                    __builtin_prefetch(table.slot(ids[i + 4 * ahead]));
                }
                if (i + ahead < e) {
                    prefetch(i + ahead);
                }
                size_t l;
                const uint8_t* c = code(i, &l);
                if (c == nullptr || !probed(l)) {
                    continue;
                }
                float dis;
                if (sq8) {
                    dis = sw.base + dot(sw.w.data(), c, cs);
                    if (sw.residual) {
                        dis += cdis[l];
                    }
                } else {
                    sc->set_list(l, cdis[l]);
                    dis = sc->distance_to_code(c);
                }
                if (C::cmp(D[0], dis)) {
                    faiss::heap_replace_top<C>(k, D, L, dis, i);
                }
            }
        } catch (const std::exception& ex) {
            if (!failed.exchange(true)) {
                failure = ex.what();
            }
        }
    }
    if (failed) {
        FAISS_THROW_MSG(failure);
    }
    FAISS_THROW_IF_NOT_MSG(
            !stale, "a location lies outside the lists: the caller's locations are out of date");
    for (size_t j = 0; j < size_t(nt) * k; j++) {
        if (tl[j] >= 0 && C::cmp(distances[0], td[j])) {
            faiss::heap_replace_top<C>(k, distances, labels, td[j], tl[j]);
        }
    }
    faiss::heap_reorder<C>(k, distances, labels);
    // The heap holds positions in ids. Checking that each location holds
    // its id costs a cache miss (the lists' id arrays), so only the
    // results are checked, not every id scored.
    for (idx_t j = 0; j < k && labels[j] >= 0; j++) {
        idx_t i = labels[j];
        uint64_t at = *table.slot(ids[i]) - 1;
        size_t l = faiss::lo_listno(at), o = faiss::lo_offset(at);
        FAISS_THROW_IF_NOT_MSG(
                lists->ids[l][o] == idx_t(ids[i]),
                "a location does not hold its id: the caller's locations are out of date");
        labels[j] = idx_t(ids[i]);
    }
}

} // namespace
} // extern "C++"

int faiss_IndexIVF_search_located(
        const FaissIndex* index,
        const float* x,
        idx_t n,
        const uint64_t* ids,
        const uint64_t* const* pages,
        size_t npages,
        int page_bits,
        idx_t nprobe,
        idx_t k,
        float* distances,
        idx_t* labels) {
    try {
        faiss::ArrayInvertedLists* lists;
        auto ivf = ivf_of(const_cast<FaissIndex*>(index), &lists);
        FAISS_THROW_IF_NOT_MSG(k > 0, "k must be positive");
        FAISS_THROW_IF_NOT_MSG(page_bits > 0 && page_bits < 48, "page_bits out of range");
        locatedTable table{pages, npages, page_bits};
        if (ivf->metric_type == faiss::METRIC_INNER_PRODUCT) {
            search_located<faiss::CMin<float, idx_t>>(ivf, lists, x, n, ids, table, nprobe, k, distances, labels);
        } else {
            search_located<faiss::CMax<float, idx_t>>(ivf, lists, x, n, ids, table, nprobe, k, distances, labels);
        }
    }
    CATCH_AND_HANDLE
}

/* The two inner-product kernels of 8-bit codes, for tests. */
float faiss_tandem_dot_u8(const float* w, const uint8_t* c, size_t d, int portable) {
    return portable ? dotU8Portable(w, c, d) : dotU8()(w, c, d);
}

int faiss_IndexIVF_has_RaBitQ(const FaissIndex*) {
    return 1;
}

int faiss_IndexIVF_list_vector_count(
        const FaissIndexIVF* index,
        idx_t* list_counts,
        size_t nlist,
        const FaissSearchParameters* params) {
    try {
        list_vector_count(
                reinterpret_cast<const faiss::IndexIVF*>(index),
                list_counts,
                nlist,
                reinterpret_cast<const faiss::SearchParameters*>(params));
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_search_closest_eligible_centroids(
        const FaissIndexIVF* index,
        idx_t n,
        const float* x,
        idx_t k,
        float* centroid_distances,
        idx_t* centroid_ids,
        const FaissSearchParameters* params) {
    try {
        auto ivf = reinterpret_cast<const faiss::IndexIVF*>(index);
        search_dispatch(
                ivf->quantizer,
                n,
                x,
                k,
                reinterpret_cast<const faiss::SearchParameters*>(params),
                centroid_distances,
                centroid_ids);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_search_preassigned_with_params(
        const FaissIndexIVF* index,
        idx_t n,
        const float* x,
        idx_t k,
        const idx_t* assign,
        const float* centroid_dis,
        float* distances,
        idx_t* labels,
        int store_pairs,
        const FaissSearchParameters* params) {
    try {
        auto ivf = reinterpret_cast<const faiss::IndexIVF*>(index);
        auto base = reinterpret_cast<const faiss::SearchParameters*>(params);
        const faiss::SearchParametersIVF* p = nullptr;
        faiss::SearchParametersIVF converted;
        if (base != nullptr) {
            p = dynamic_cast<const faiss::SearchParametersIVF*>(base);
            if (p == nullptr) {
                converted.sel = base->sel;
                converted.nprobe = ivf->nprobe;
                converted.max_codes = ivf->max_codes;
                p = &converted;
            }
        }
        ivf->search_preassigned(
                n, x, k, assign, centroid_dis, distances, labels, store_pairs != 0, p);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexIVF_get_centroids_and_cardinality(
        const FaissIndexIVF* index,
        float* centroids,
        size_t* cardinalities,
        idx_t* centroid_ids) {
    try {
        auto ivf = reinterpret_cast<const faiss::IndexIVF*>(index);
        centroids_and_cardinality(ivf, ivf->d, centroids, cardinalities, centroid_ids);
    }
    CATCH_AND_HANDLE
}

// ---- IndexBinary ----

int faiss_index_binary_factory(FaissIndexBinary** p_index, int d, const char* description) {
    try {
        *p_index = reinterpret_cast<FaissIndexBinary*>(
                faiss::index_binary_factory(d, description));
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinary_search_with_params(
        const FaissIndexBinary* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        const FaissSearchParameters* params,
        int32_t* distances,
        idx_t* labels) {
    try {
        auto idx = reinterpret_cast<const faiss::IndexBinary*>(index);
        auto p = reinterpret_cast<const faiss::SearchParameters*>(params);
        check_no_selector_binary(p);
        auto ivf = dynamic_cast<const faiss::IndexBinaryIVF*>(idx);
        auto pivf = dynamic_cast<const faiss::SearchParametersIVF*>(p);
        if (ivf == nullptr || pivf == nullptr) {
            idx->search(n, x, k, distances, labels);
            return 0;
        }
        size_t nprobe = std::min(pivf->nprobe, ivf->nlist);
        std::vector<idx_t> assign(n * nprobe);
        std::vector<int32_t> cdis(n * nprobe);
        ivf->quantizer->search(n, x, nprobe, cdis.data(), assign.data());
        ivf->search_preassigned(
                n, x, k, assign.data(), cdis.data(), distances, labels, false, pivf);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinary_size(const FaissIndexBinary* index, size_t* size) {
    try {
        auto idx = reinterpret_cast<const faiss::IndexBinary*>(index);
        if (auto flat = dynamic_cast<const faiss::IndexBinaryFlat*>(idx)) {
            *size = flat->xb.size();
        } else if (auto ivf = dynamic_cast<const faiss::IndexBinaryIVF*>(idx)) {
            size_t q = 0;
            faiss_IndexBinary_size(
                    reinterpret_cast<const FaissIndexBinary*>(ivf->quantizer), &q);
            *size = invlists_bytes(ivf->invlists) + q;
        } else {
            *size = 0;
        }
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinary_sa_code_size(const FaissIndexBinary* index, size_t* size) {
    try {
        *size = reinterpret_cast<const faiss::IndexBinary*>(index)->code_size;
    }
    CATCH_AND_HANDLE
}

int faiss_Set_quantizers_binary(FaissIndexBinary* index, FaissIndexBinary* src) {
    try {
        auto dst = dynamic_cast<faiss::IndexBinaryIVF*>(reinterpret_cast<faiss::IndexBinary*>(index));
        auto from = dynamic_cast<faiss::IndexBinaryIVF*>(reinterpret_cast<faiss::IndexBinary*>(src));
        FAISS_THROW_IF_NOT_MSG(dst && from, "set_quantizers_binary needs two binary IVF indexes");
        FAISS_THROW_IF_NOT_MSG(dst->d == from->d && dst->nlist == from->nlist, "shape mismatch");
        FAISS_THROW_IF_NOT_MSG(dst->ntotal == 0, "the target index must be empty");
        auto flat = dynamic_cast<faiss::IndexBinaryFlat*>(from->quantizer);
        FAISS_THROW_IF_NOT_MSG(flat != nullptr, "only flat binary quantizers can be shared");
        auto q = new faiss::IndexBinaryFlat(*flat);
        if (dst->own_fields) {
            delete dst->quantizer;
        }
        dst->quantizer = q;
        dst->own_fields = true;
        dst->is_trained = from->is_trained;
    }
    CATCH_AND_HANDLE
}

FaissIndexBinaryIVF* faiss_IndexBinaryIVF_cast(FaissIndexBinary* index) {
    return reinterpret_cast<FaissIndexBinaryIVF*>(
            dynamic_cast<faiss::IndexBinaryIVF*>(reinterpret_cast<faiss::IndexBinary*>(index)));
}

size_t faiss_IndexBinaryIVF_nlist(const FaissIndexBinaryIVF* index) {
    return reinterpret_cast<const faiss::IndexBinaryIVF*>(index)->nlist;
}

size_t faiss_IndexBinaryIVF_nprobe(const FaissIndexBinaryIVF* index) {
    return reinterpret_cast<const faiss::IndexBinaryIVF*>(index)->nprobe;
}

void faiss_IndexBinaryIVF_set_nprobe(FaissIndexBinaryIVF* index, size_t nprobe) {
    reinterpret_cast<faiss::IndexBinaryIVF*>(index)->nprobe = nprobe;
}

int faiss_IndexBinaryIVF_set_direct_map(FaissIndexBinaryIVF* index, int direct_map_type) {
    try {
        check_direct_map_type(direct_map_type);
        reinterpret_cast<faiss::IndexBinaryIVF*>(index)->set_direct_map_type(
                faiss::DirectMap::Type(direct_map_type));
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinaryIVF_merge_from(FaissIndexBinary* index, FaissIndexBinary* other, idx_t add_id) {
    try {
        reinterpret_cast<faiss::IndexBinary*>(index)->merge_from(
                *reinterpret_cast<faiss::IndexBinary*>(other), add_id);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinaryIVF_list_vector_count(
        const FaissIndexBinaryIVF* index,
        idx_t* list_counts,
        size_t nlist,
        const FaissSearchParameters* params) {
    try {
        list_vector_count(
                reinterpret_cast<const faiss::IndexBinaryIVF*>(index),
                list_counts,
                nlist,
                reinterpret_cast<const faiss::SearchParameters*>(params));
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinaryIVF_search_closest_eligible_centroids(
        const FaissIndexBinaryIVF* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        int32_t* centroid_distances,
        idx_t* centroid_ids,
        const FaissSearchParameters* params) {
    try {
        // FAISS 1.7.3's binary quantizers take no selector: compute the
        // Hamming distances to the eligible centroids here.
        auto ivf = reinterpret_cast<const faiss::IndexBinaryIVF*>(index);
        const faiss::IDSelector* sel = params
                ? reinterpret_cast<const faiss::SearchParameters*>(params)->sel
                : nullptr;
        size_t cs = ivf->code_size;
        std::vector<uint8_t> centroids(ivf->nlist * cs);
        for (size_t l = 0; l < ivf->nlist; l++) {
            ivf->quantizer->reconstruct(l, centroids.data() + l * cs);
        }
        std::vector<std::pair<int32_t, idx_t>> scored;
        for (idx_t q = 0; q < n; q++) {
            scored.clear();
            for (size_t l = 0; l < ivf->nlist; l++) {
                if (sel && !sel->is_member(idx_t(l))) {
                    continue;
                }
                int32_t dist = 0;
                const uint8_t* a = x + q * cs;
                const uint8_t* b = centroids.data() + l * cs;
                for (size_t j = 0; j < cs; j++) {
                    dist += __builtin_popcount(unsigned(a[j] ^ b[j]));
                }
                scored.emplace_back(dist, idx_t(l));
            }
            size_t keep = std::min<size_t>(scored.size(), size_t(k));
            std::partial_sort(scored.begin(), scored.begin() + keep, scored.end());
            for (idx_t j = 0; j < k; j++) {
                bool ok = size_t(j) < keep;
                centroid_distances[q * k + j] = ok ? scored[j].first : INT32_MAX;
                centroid_ids[q * k + j] = ok ? scored[j].second : -1;
            }
        }
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinaryIVF_search_preassigned_with_params(
        const FaissIndexBinaryIVF* index,
        idx_t n,
        const uint8_t* x,
        idx_t k,
        const idx_t* assign,
        const int32_t* centroid_dis,
        int32_t* distances,
        idx_t* labels,
        int store_pairs,
        const FaissSearchParameters* params) {
    try {
        auto ivf = reinterpret_cast<const faiss::IndexBinaryIVF*>(index);
        auto base = reinterpret_cast<const faiss::SearchParameters*>(params);
        check_no_selector_binary(base);
        auto p = dynamic_cast<const faiss::SearchParametersIVF*>(base);
        ivf->search_preassigned(
                n, x, k, assign, centroid_dis, distances, labels, store_pairs != 0, p);
    }
    CATCH_AND_HANDLE
}

int faiss_IndexBinaryIVF_get_centroids_and_cardinality(
        const FaissIndexBinaryIVF* index,
        uint8_t* centroids,
        size_t* cardinalities,
        idx_t* centroid_ids) {
    try {
        auto ivf = reinterpret_cast<const faiss::IndexBinaryIVF*>(index);
        centroids_and_cardinality(ivf, ivf->code_size, centroids, cardinalities, centroid_ids);
    }
    CATCH_AND_HANDLE
}

// ---- serialisation to memory ----

int faiss_write_index_buf(const FaissIndex* index, size_t* size, unsigned char** buf) {
    try {
        faiss::VectorIOWriter writer;
        faiss::write_index(reinterpret_cast<const faiss::Index*>(index), &writer);
        copy_out(writer.data, size, buf);
    }
    CATCH_AND_HANDLE
}

int faiss_read_index_buf(const unsigned char* buf, size_t size, int io_flags, FaissIndex** p_out) {
    try {
        check_buffer_flags(io_flags);
        faiss::VectorIOReader reader;
        reader.data.assign(buf, buf + size);
        *p_out = reinterpret_cast<FaissIndex*>(faiss::read_index(&reader, faiss_io_flags(io_flags)));
    }
    CATCH_AND_HANDLE
}

namespace {

// StreamWriter and StreamReader hand FAISS's serialisation to the caller's
// function piece by piece (a list's codes at a time, for an IVF index).
struct StreamWriter : faiss::IOWriter {
    tandem_io_fn fn;
    uintptr_t handle;
    StreamWriter(tandem_io_fn f, uintptr_t h) : fn(f), handle(h) {}
    size_t operator()(const void* ptr, size_t size, size_t nitems) override {
        if (size == 0 || nitems == 0) {
            return nitems;
        }
        return fn(handle, const_cast<void*>(ptr), size * nitems) / size;
    }
};

struct StreamReader : faiss::IOReader {
    tandem_io_fn fn;
    uintptr_t handle;
    StreamReader(tandem_io_fn f, uintptr_t h) : fn(f), handle(h) {}
    size_t operator()(void* ptr, size_t size, size_t nitems) override {
        if (size == 0 || nitems == 0) {
            return nitems;
        }
        FAISS_THROW_IF_NOT_MSG(nitems <= SIZE_MAX / size, "read size overflows");
        return fn(handle, ptr, size * nitems) / size;
    }
};

} // namespace

int faiss_write_index_stream(const FaissIndex* index, tandem_io_fn fn, uintptr_t handle) {
    try {
        FAISS_THROW_IF_NOT_MSG(fn != nullptr, "no writer");
        StreamWriter writer(fn, handle);
        faiss::write_index(reinterpret_cast<const faiss::Index*>(index), &writer);
    }
    CATCH_AND_HANDLE
}

int faiss_read_index_stream(tandem_io_fn fn, uintptr_t handle, int io_flags, FaissIndex** p_out) {
    try {
        FAISS_THROW_IF_NOT_MSG(fn != nullptr, "no reader");
        check_buffer_flags(io_flags);
        StreamReader reader(fn, handle);
        *p_out = reinterpret_cast<FaissIndex*>(faiss::read_index(&reader, faiss_io_flags(io_flags)));
    }
    CATCH_AND_HANDLE
}

int faiss_write_index_binary_buf(const FaissIndexBinary* index, size_t* size, unsigned char** buf) {
    try {
        faiss::VectorIOWriter writer;
        faiss::write_index_binary(reinterpret_cast<const faiss::IndexBinary*>(index), &writer);
        copy_out(writer.data, size, buf);
    }
    CATCH_AND_HANDLE
}

int faiss_read_index_binary_buf(
        const unsigned char* buf,
        size_t size,
        int io_flags,
        FaissIndexBinary** p_out) {
    try {
        check_buffer_flags(io_flags);
        faiss::VectorIOReader reader;
        reader.data.assign(buf, buf + size);
        *p_out = reinterpret_cast<FaissIndexBinary*>(
                faiss::read_index_binary(&reader, faiss_io_flags(io_flags)));
    }
    CATCH_AND_HANDLE
}

void faiss_free_buf(unsigned char** buf) {
    if (buf != nullptr) {
        free(*buf);
        *buf = nullptr;
    }
}

// ---- utilities ----

int faiss_real_to_binary(size_t n, size_t d, const float* x, uint8_t* out) {
    try {
        FAISS_THROW_IF_NOT_MSG(d % 8 == 0, "dimension must be a multiple of 8");
        for (size_t i = 0; i < n; i++) {
            faiss::real_to_binary(d, x + i * d, out + i * (d / 8));
        }
    }
    CATCH_AND_HANDLE
}

void faiss_set_omp_threads(unsigned int n) {
    omp_set_num_threads(int(n));
}

} // extern "C"
